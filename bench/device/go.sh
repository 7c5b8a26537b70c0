#!/usr/bin/env bash
# On a GPU machine reached only through one command at a time (bench/README.md, "GPUs"),
# after bench/device/prepare.sh here: installs, builds, makes the twins, then measures phase by phase within a deadline, each phase's
# output in $OUT (8 files at most come back). Through the device tool:
#
#     run(command="bash bench/device/go.sh", carry=[".device"], timeout_s=600)
#     run(command="bash bench/device/go.sh cpu bert", ...)   # if the first skipped them:
#                                                            # within 30 s, while it is warm
# Phases (default: all of them, in this order, the issue's first targets first):
#   build   the wheels into /tmp/site; pyggml with CUDA (sm_90) into build/device-proj: the
#           one bench/device/prebuild.sh made here where it was made from these sources,
#           else built there (about 260 s on 16 cores); the twins of the two real models
#   test    the op suite on the GPU (pytest --device CUDA0 tests/pyggml)
#   check   a greedy continuation with all and half of the layers on the GPU against the CPU
#   families the same for the families landed since (bench/device/families.py: gated DeltaNet,
#           MXFP4 experts, images through the splice), flash attention off and on
#   gpu     pp512 / tg128 on the GPU, ours (through the batch loop, steps chained) beside
#           llama-bench (-ngl 99), flash attention off, on
#   loop    prompt and generation through the batch loop on the GPU; 1, 2 and 4 streams
#   host    a step's host phases on the GPU (bench/prefill_host.py --device CUDA0)
#   cpu     pp512 / tg64 at 1 to 16 threads on the Xeon, ours (the batch loop) beside
#           llama-bench, with a CPU-only build made for it there (build/device-cpu, 30 s)
#   bert    the f16 BERT that aborted on this AMX CPU (tests/runner/convert/test_bert.py)
#   cpustep where the Xeon's CPU gap lies: a step's compute and host time apart at 1 and 16
#           threads (bench/prefill_host.py), repacked, plain, on the calling thread, held
#           to one CPU, perf's top symbols, beside llama-bench; greedy steps chained and
#           not (bench/loop_host.py); with a thread on every CPU, the loop's ways of
#           stepping (bench/overlap.py) (into cpu.txt: 8 files at most come back)
# DEADLINE: seconds after the start by which everything ends (default 560); a phase is cut
# at the deadline, and one whose estimate no longer fits is skipped (build: 40 s where the
# prebuilt matches, else 300). DEVICE_CUDA=0 builds for
# the CPU alone (a dry run on a machine without a GPU; the GPU phases then fail).
set -uo pipefail
cd "$(dirname "$0")/../.."
START=$SECONDS
DEADLINE=${DEADLINE:-560}
OUT=${OUT:-/tmp/device-out}
DIR=${DEVICE_DIR:-.device}
PROJ=$PWD/build/device-proj
TWINS=$PWD/build/device-twins
mkdir -p "$OUT" "$TWINS"
CPU_PROJ=$PWD/build/device-cpu
# The builds come first on the path; `python3 -m` and `-c` run with PYTHONSAFEPATH=1, since
# from the checkout they would import its sources first (no compiled module there)
export SYSTEM_LIBRARY_PATH=${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$PROJ:/tmp/site PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$PROJ/pyggml$SYSTEM_LIBRARY_PATH
export DIR PROJ CPU_PROJ TWINS CORES=$(nproc) CPU_THREADS=${CPU_THREADS:-1,2,4,8,16}
export SMOL=$TWINS/smollm2.gguf GEMMA=$TWINS/gemma3.gguf LLAMA_BENCH=$PWD/build/llama-bench
# llama-bench travels compressed (prepare.sh): 2 MB against 7 of the tool's 64 MiB
[ -x "$LLAMA_BENCH" ] || { mkdir -p build && xz -dc "$DIR/llama-bench.xz" > "$LLAMA_BENCH" &&
                           chmod +x "$LLAMA_BENCH"; }

say() { echo "[$((SECONDS - START)) s] $*" | tee -a "$OUT/summary.txt"; }

# phase NAME ESTIMATE_S: run phase_NAME into $OUT/NAME.txt (or the file OUTPUT names), cut
# at the deadline
phase() {
    local name=$1 estimate=$2 left=$((DEADLINE - (SECONDS - START)))
    local file=${OUTPUT[$name]:-$name}
    if [ "$left" -lt "$estimate" ]; then
        say "$name: skipped ($left s left, it takes about $estimate)"
        return
    fi
    local began=$SECONDS
    timeout --kill-after=5 "$left" bash -c "phase_$name" >> "$OUT/$file.txt" 2>&1
    local status=$?
    say "$name: exit $status after $((SECONDS - began)) s"
}

# pip's build of this checkout into $1, in its own CMake folder $2, with more -C options
build_into() {
    local target=$1 cmake_dir=$2
    shift 2
    CMAKE_BUILD_PARALLEL_LEVEL=$CORES python3 -m pip install --no-build-isolation --no-deps \
        --no-index --no-compile --target "$target" . -C build-dir="$cmake_dir" \
        -C cmake.define.PYGGML_GGML_SOURCE="$PWD/$DIR/ggml" "$@"
}

# The CUDA build made here (bench/device/prebuild.sh) where its key matches this checkout:
# the sources as they are, its compiled files beside them
unpack_prebuilt() {
    local archive=$DIR/cuda-cp312.tar.xz
    [ -e "$archive" ] || return 1
    if ! bash bench/device/prebuilt_key.sh "$DIR" "$archive"; then
        echo "prebuilt: made from other sources, building here"
        return 1
    fi
    mkdir -p "$PROJ" && cp -r pyggml runner "$PROJ" && tar xJf "$archive" -C "$PROJ"
    # it loads, and where there is a GPU (nvidia-smi) it sees it
    local gpu=1
    command -v nvidia-smi > /dev/null && gpu='any(d.name.startswith("CUDA") for d in pyggml.devices())'
    if ! PYTHONSAFEPATH=1 python3 -c "import sys, pyggml; sys.exit(not ($gpu))"; then
        echo "prebuilt: does not load or sees no GPU, building here"
        rm -rf "$PROJ"
        return 1
    fi
    echo "prebuilt: $archive"
}

phase_build() {
    set -e
    if [ ! -e /tmp/site/.installed ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$DIR"/whl/*.whl
        touch /tmp/site/.installed
    fi
    if [ ! -e "$PROJ/pyggml/build_info.json" ]; then
        if [ "${DEVICE_CUDA:-1}" = 1 ]; then
            unpack_prebuilt || build_into "$PROJ" build/device-cmake -C cmake.define.GGML_CUDA=ON \
                -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90
        else
            build_into "$PROJ" build/device-cmake
        fi
    fi
    PYTHONSAFEPATH=1 python3 -m pyggml
    for name in smollm2 gemma3; do
        [ -e "$TWINS/$name.gguf" ] || python3 bench/twin.py make "$DIR/twins/$name.json.gz" \
            "$TWINS/$name.gguf"
    done
    ls -la "$TWINS"
    "$LLAMA_BENCH" --list-devices
}

# The cpu and bert phases measure the CPU as its users build for it: -march=native (the
# prebuilt is not), and no GPU beside it (llama-bench -ngl 0 would still send a prompt's
# products to one). A CPU-only build of its own where $PROJ has CUDA (about 30 s).
native_cpu() {
    [ "${DEVICE_CUDA:-1}" = 1 ] || return 0
    [ -e "$CPU_PROJ/pyggml/build_info.json" ] || build_into "$CPU_PROJ" build/device-cpu-cmake \
        -C cmake.define.GGML_CUDA=OFF
    export PYTHONPATH=$CPU_PROJ:/tmp/site LD_LIBRARY_PATH=$CPU_PROJ/pyggml$SYSTEM_LIBRARY_PATH
    PYTHONSAFEPATH=1 python3 -m pyggml
}

phase_test() {
    PYTHONSAFEPATH=1 python3 -m pytest -q -p no:cacheprovider --device CUDA0 tests/pyggml
}

phase_check() {
    for flash in "" --flash; do
        python3 bench/offload.py --model "$SMOL" --model "$GEMMA" --prompt 300 --generate 16 \
            --threads 8 $flash
    done
}

phase_families() {
    python3 bench/device/families.py check "$DIR/families" --threads 8
}

phase_gpu() {
    for model in "$SMOL" "$GEMMA"; do
        for flash in "" --flash; do
            python3 bench/threads.py --model "$model" --device CUDA0 --threads 8 --prompt 512 \
                --generate 128 --repeat 3 --llama-bench "$LLAMA_BENCH" --loop $flash
        done
    done
}

phase_loop() {
    python3 bench/generate.py --model "$SMOL" --model "$GEMMA" --num-gpu 99 --threads 8 \
        --repeat 2
    for flash in "" --flash; do
        python3 bench/streams.py --model "$SMOL" --model "$GEMMA" --num-gpu 99 --threads 8 \
            --streams 1,2,4 --repeat 2 $flash
    done
}

phase_host() {
    for flash in "" --flash; do
        python3 bench/prefill_host.py --model "$SMOL" "$GEMMA" --device CUDA0 --threads 8 \
            --repeat 3 $flash
    done
    python3 bench/prefill_host.py --model "$SMOL" "$GEMMA" --device CUDA0 --threads 8 \
        --prompt 64 --decode 64 --repeat 3
}

phase_cpu() {
    native_cpu
    for model in "$SMOL" "$GEMMA"; do
        python3 bench/threads.py --model "$model" --threads "$CPU_THREADS" --repeat 2 \
            --llama-bench "$LLAMA_BENCH" --loop
    done
}

phase_bert() {
    native_cpu
    PYTHONSAFEPATH=1 python3 -m pytest -q -p no:cacheprovider -p no:xdist \
        tests/runner/convert/test_bert.py
}

# Where the Xeon's CPU gap lies. SmolLM2 was 0.71-0.91x llama-bench there at every thread
# count, plain weights too and at 1 thread, where both run the same kernels of the same
# libraries: the topology (SMT siblings, NUMA), then a step's compute apart from its host
# time (prefill_host.py) beside llama-bench at the same flash setting, with repacked and plain
# weights, on the scheduler's compute thread and on the calling one (--inline), and the whole
# process held to one CPU (taskset), where the OS cannot move threads; perf's top symbols
# where perf runs; greedy steps chained on the CPU and not (loop_host.py).
phase_cpustep() {
    native_cpu
    lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA|L2|L3)"
    cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list \
        /sys/devices/system/cpu/cpufreq/policy0/scaling_governor 2>/dev/null
    local step="python3 bench/prefill_host.py --prompt 64 --decode 64 --repeat 3"
    local bench="$LLAMA_BENCH -p 64 -n 64 -r 3 -fa 0"
    for threads in 1 16; do
        local variants=("" --plain "--plain --inline")
        [ $threads = 1 ] || variants=("" --plain)
        for variant in "${variants[@]}"; do
            echo "== ours, $threads threads, ${variant:-repacked}"
            $step --model "$SMOL" "$GEMMA" --threads $threads $variant
        done
        for model in "$SMOL" "$GEMMA"; do
            $bench -m "$model" -t $threads --repack 1,0
        done
    done
    echo "== greedy steps chained on the CPU and not, through the batch loop"
    for threads in 1 8; do
        python3 bench/loop_host.py --model "$SMOL" --threads $threads --generate 64 --rounds 2
    done
    echo "== ggml's threads on every CPU: one step after the other against overlapped"
    python3 bench/overlap.py --model "$SMOL" --threads "$CORES" --rounds 8
    echo "== one prompt of 128 at 1 thread, plain: pure compute"
    python3 bench/prefill_host.py --model "$SMOL" --prompt 128 --repeat 2 --threads 1 --plain
    $LLAMA_BENCH -m "$SMOL" -p 128 -n 0 -r 3 -fa 0 -t 1 --repack 0
    local cpu=$((CORES - 1))
    echo "== held to CPU $cpu, 1 thread, plain"
    taskset -c $cpu $step --model "$SMOL" --threads 1 --plain
    taskset -c $cpu $bench -m "$SMOL" -t 1 --repack 0
    if perf record -q -e cpu-clock -o /tmp/perf.ours -- true 2>/dev/null; then
        echo "== perf: top symbols of 1-thread decode, ours then llama-bench (plain)"
        perf record -q -e cpu-clock -o /tmp/perf.ours -- $step --model "$SMOL" --threads 1 \
            --plain > /dev/null 2>&1
        perf record -q -e cpu-clock -o /tmp/perf.llama -- $bench -m "$SMOL" -t 1 --repack 0 \
            > /dev/null 2>&1
        for data in /tmp/perf.ours /tmp/perf.llama; do
            perf report -i $data --sort dso,sym --stdio 2>/dev/null | grep -v "^#" | head -14
        done
    fi
}

PHASES=(build test check families gpu loop host cpu bert cpustep)
declare -A ESTIMATE=([build]=300 [test]=30 [check]=40 [families]=60 [gpu]=60 [loop]=60 [host]=30 [cpu]=270
                     [bert]=40 [cpustep]=240)
declare -A OUTPUT=([cpustep]=cpu)
# the build takes 20-30 s where the prebuilt matches these sources (or is unpacked already),
# not the 300 s of a CUDA build there: a short DEADLINE must not skip it
if [ -e "$PROJ/pyggml/build_info.json" ] || { [ -e "$DIR/cuda-cp312.tar.xz" ] &&
        bash bench/device/prebuilt_key.sh "$DIR" "$DIR/cuda-cp312.tar.xz"; }; then
    ESTIMATE[build]=40
fi
export -f "${PHASES[@]/#/phase_}" build_into unpack_prebuilt native_cpu
chosen=("$@")
[ $# -gt 0 ] || chosen=("${PHASES[@]}")
say "go.sh: ${chosen[*]} (deadline ${DEADLINE} s, $CORES cores)"
for name in "${chosen[@]}"; do
    if [ -z "${ESTIMATE[$name]:-}" ]; then
        say "$name: no such phase"
    elif [ "$name" != build ] && [ ! -e "$PROJ/pyggml/build_info.json" ]; then
        say "$name: no build"
    else
        phase "$name" "${ESTIMATE[$name]}"
    fi
done
# the tables, for the reply's output tail (the whole files come back under $OUT)
for name in "${PHASES[@]:1}"; do
    [ -s "$OUT/$name.txt" ] && { echo "== $name"; grep -v "^WARNING\|^\[" "$OUT/$name.txt" | tail -n 24; }
done
exit 0

#!/usr/bin/env bash
# Everything a GPU machine without network (bench/README.md, "GPUs") needs from here, into
# .device/ (ignored by git, carried by the device tool: `carry: [".device"]`), so that its 15 minutes go to
# measuring: the Python packages it lacks as wheels, the patched ggml tree (pruned to the
# backends it builds), llama.cpp's llama-bench built against this checkout's ggml, and the
# skeletons of the two real models (their twins are made there). Run from the checkout,
# after `pip install -e .` (the llama-bench build links against the installed pyggml):
#
#     bash bench/device/prepare.sh              # then: bench/device/go.sh on the machine
#
# About 4 minutes on 2 cores, most of it llama-bench; each part is skipped when its output
# is already there (delete .device/ to start again). DEVICE_DIR and DEVICE_PYTHON name
# another folder and the Python the wheels are for (the machine's is 3.12; a dry run of go.sh
# here: .device311 and 3.11). Nothing here is committed: it is built from the pins (vendor/ggml/pin.json, the
# versions installed here) and the model catalog.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${DEVICE_DIR:-.device}
PYTHON_VERSION=${DEVICE_PYTHON:-3.12}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")" "$DIR/whl" "$DIR/twins"
grep -qxF "/$DIR/" "$exclude" 2>/dev/null || echo "/$DIR/" >> "$exclude"

# What the runner imports and the machine's image lacks (its list: the device tool's
# KINDS.md), at the versions installed here; not llguidance (3 MB, grammars, no phase uses
# them): everything that travels must stay under 64 MiB.
WHEELS="cffi pycparser gguf fastapi starlette pydantic pydantic_core annotated-types
typing-inspection typing_extensions uvicorn soundfile soxr python-multipart patch-ng"
PLATFORMS=$(for n in 17 24 27 28 31 34 35; do echo "--platform manylinux_2_${n}_x86_64"; done)
if [ ! -e "$DIR/whl/.complete" ]; then
    for name in $WHEELS; do
        version=$(python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
        python -m pip download -q --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" \
            --implementation cp $PLATFORMS -d "$DIR/whl" "$name==$version" 2>&1 \
            | { grep -v "is ignored: it is neither" || true; }
    done
    touch "$DIR/whl/.complete"
fi

# The patched ggml tree, less the backends and CPU architectures the machine does not build
# (77 MB -> about 7); derived again where the patches changed (derive keeps a tree whose
# recipe is the current one)
python cmake/ggml_source.py derive "$DIR/ggml" > /dev/null
if [ -e "$DIR/ggml/src/ggml-metal" ]; then
    for backend in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu \
                   zdnn zendnn cpu/kleidiai cpu/spacemit cpu/arch/{arm,loongarch,powerpc,riscv,s390,wasm}; do
        rm -rf "$DIR/ggml/src/ggml-$backend"
    done
fi

# llama-bench from the same pinned source archive, linked against pyggml's libraries (by
# name: on the machine LD_LIBRARY_PATH points it at the CUDA build of the same tree)
# (stripped and xz-compressed into llama-bench.xz, 2 MB, so that it travels beside the CUDA
# build; `xz -dk .device/llama-bench.xz` gives the binary the local benchmarks take)
if [ ! -e "$DIR/llama-bench.xz" ]; then
    read -r archive top < <(python -c "import cmake.ggml_source as g, json
pin = json.load(open(g.PIN_FILE))
print(g.fetch_archive(pin, g.default_cache_dir()), pin['tree'].split('/')[0])")
    work=$(mktemp -d)
    tar xzf "$archive" -C "$work" --exclude="$top/vendor/llama.cpp/ggml" \
        --exclude="$top/vendor/llama.cpp/models" --exclude="$top/vendor/llama.cpp/docs" \
        "$top/vendor/llama.cpp"
    source="$work/$top/vendor/llama.cpp"
    ln -s "$PWD/$DIR/ggml" "$source/ggml"    # llama.cpp's CMake includes ggml/cmake/common.cmake
    package=$(python -c "import os, pyggml._ggml as g; print(os.path.dirname(g.__file__))")
    cmake -S bench/device/llama-bench -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_SOURCE="$source" -DPYGGML_PACKAGE="$package" -DGGML_INCLUDE="$PWD/$DIR/ggml/include" \
        > "$work/configure.log"
    cmake --build "$work/build" --target llama-bench > "$work/build.log"
    strip -o "$work/llama-bench" "$work/build/bin/llama-bench"
    xz -T0 -9 -c "$work/llama-bench" > "$DIR/llama-bench.xz"
    rm -rf "$work"
fi

# The real models' skeletons (metadata, vocabulary, tensor shapes and types)
for name in smollm2:135m gemma3:270m-base; do
    skeleton="$DIR/twins/${name%%:*}.json.gz"
    if [ ! -e "$skeleton" ]; then
        real=$(python -c "import sys; from runner.loading import store; \
print(store.pull(sys.argv[1], progress=False))" "$name")
        python bench/twin.py skeleton "$real" "$skeleton"
    fi
done
# The families landed since the machine last saw the runner, tiny (bench/device/families.py)
[ -e "$DIR/families/families.json" ] || python bench/device/families.py make "$DIR/families"
du -sh "$DIR"/* | sed 's/^/prepared: /'
bash bench/device/travel_size.sh "$DIR"
prebuilt=$DIR/cuda-cp312.tar.xz
if bash bench/device/prebuilt_key.sh "$DIR" "$prebuilt"; then
    echo "prebuilt: $prebuilt matches this checkout"
else
    echo "prebuilt: none for this checkout (bash bench/device/prebuild.sh, about 25 minutes" \
         "here; without it go.sh builds there, about 260 s)"
fi

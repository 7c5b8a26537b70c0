#!/usr/bin/env bash
# pyggml's CUDA build for the lent GPU machine (sm_90, Python 3.12), made here so that its 15
# minutes skip the 260 s build: what it installs beside the sources (_ggml, libggml*,
# build_info.json, the license) into .device/cuda-cp312.tar.xz, with a key over everything
# they were built from. go.sh uses them where the key matches this checkout (the Python
# sources travel as they are) and builds there otherwise. After bench/device/prepare.sh
# (it derives .device/ggml):
#
#     bash bench/device/prebuild.sh             # about 25 minutes on 2 cores
#
# Needs nvcc 13 and a Python 3.12 (DEVICE_PY312, default python3.12). cuBLAS's headers and
# libraries come from its wheel; the driver library from a stub made here, with every
# function cuda.h declares (linking needs one; the machine's own is loaded there). The CPU
# backend in it is built for x86-64 with AVX2 (not -march=native for this CPU): the GPU
# phases need one that runs on the Xeon; the cpu and bert phases build their own there.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${DEVICE_DIR:-.device}
WORK=$PWD/build/device-prebuild
PY312=${DEVICE_PY312:-python3.12}
CUDA=$(readlink -f "$(nvcc -dryrun -c -x cu /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p')")
[ -e "$DIR/ggml/.pyggml-tree.json" ] || { echo "run bench/device/prepare.sh first" >&2; exit 1; }
mkdir -p "$WORK/lib"

# The build's own Python, with the build requirements at the versions installed here
if [ ! -x "$WORK/venv/bin/python" ]; then
    "$PY312" -m venv "$WORK/venv"
    cffi=$(python -c "import importlib.metadata as m; print(m.version('cffi'))")
    "$WORK/venv/bin/pip" install -q scikit-build-core cmake ninja "cffi==$cffi" patch-ng==1.19.1
fi

# cuBLAS from its wheel (the CUDA toolkit here has the compiler and runtime only)
if [ ! -e "$WORK/cublas/include/cublas_v2.h" ]; then
    python -m pip download -q --no-deps --only-binary=:all: -d "$WORK/wheel" "nvidia-cublas>=13,<14"
    python -m zipfile -e "$WORK"/wheel/nvidia_cublas-*.whl "$WORK/wheel/x"
    mv "$WORK/wheel/x/nvidia/cu13" "$WORK/cublas"
    for name in cublas cublasLt; do
        ln -sf "$WORK/cublas/lib/lib$name.so.13" "$WORK/lib/lib$name.so"
    done
fi

# libcuda.so.1's stand-in for the link: each function cuda.h declares, under the name its
# macros give it (cuCtxCreate -> cuCtxCreate_v4) and its own
if [ ! -e "$WORK/lib/libcuda.so" ]; then
    names=$(grep -oE "CUresult CUDAAPI [a-zA-Z_0-9]+" "$CUDA/include/cuda.h" | awk '{print $3}' | sort -u)
    refs=$WORK/stub-refs.c
    { echo '#include <cuda.h>'; echo 'void *all[] = {'
      for name in $names; do echo "#ifndef SKIP_$name"; echo "(void *)&$name,"; echo "#endif"; done
      echo '};'; } > "$refs"
    skip=$(LC_ALL=C gcc -c -w -I"$CUDA/include" "$refs" -o /dev/null 2>&1 \
           | grep -oE "'[a-zA-Z_0-9]+' undeclared" | tr -d "'" | awk '{print "-DSKIP_" $1}' || true)
    gcc -c -w $skip -I"$CUDA/include" "$refs" -o "$WORK/stub-refs.o"
    { nm -u "$WORK/stub-refs.o" | awk '{print $2}'; echo "$names"; } | sort -u \
        | awk '{print "int " $1 "(void) { return 999; }"}' > "$WORK/stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 "$WORK/stub.c" -o "$WORK/lib/libcuda.so"
fi

key=$(bash bench/device/prebuilt_key.sh "$DIR")
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PATH="$CUDA/bin:$PATH" "$WORK/venv/bin/pip" install \
    --no-build-isolation --no-deps --no-index --no-compile --target "$WORK/proj" --upgrade . \
    -C build-dir="$WORK/cmake" \
    -C cmake.define.GGML_CUDA=ON -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 \
    -C cmake.define.PYGGML_GGML_SOURCE="$PWD/$DIR/ggml" -C cmake.define.GGML_NATIVE=OFF \
    -C cmake.define.CMAKE_LIBRARY_PATH="$WORK/lib" \
    -C cmake.define.CMAKE_CUDA_FLAGS="-I$WORK/cublas/include" \
    -C cmake.define.CMAKE_CXX_FLAGS="-I$WORK/cublas/include"
echo "$key" > "$WORK/proj/pyggml/prebuilt-key"
# what the build installed beside the sources: the compiled files, build_info, the license
made=$(comm -13 <(git ls-files pyggml | sort) \
                <(cd "$WORK/proj" && find pyggml -type f -not -path "*/__pycache__/*" | sort))
tar cJf "$DIR/cuda-cp312.tar.xz" -C "$WORK/proj" $made
du -h "$DIR/cuda-cp312.tar.xz" | sed 's/^/prebuilt: /'
bash bench/device/travel_size.sh "$DIR"

#!/usr/bin/env bash
# The key of a prebuilt pyggml (bench/device/prebuild.sh): one sha256 over everything its
# compiled files come from (the ggml tree's recipe, the build, the binding's declarations).
# Usage: bash bench/device/prebuilt_key.sh DEVICE_DIR, from the checkout.
set -euo pipefail
cat "$1/ggml/.pyggml-tree.json" CMakeLists.txt cmake/build_info.json.in pyggml/_build.py \
    pyggml/cdefs/*.h | sha256sum | cut -c1-64

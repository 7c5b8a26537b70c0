#!/usr/bin/env bash
# The key of a prebuilt pyggml (bench/device/prebuild.sh): one sha256 over everything its
# compiled files come from (the ggml tree's recipe and the patches themselves, so that a
# tree derived before a patch changed does not match; the build; the binding's declarations).
# Usage, from the checkout: bash bench/device/prebuilt_key.sh DEVICE_DIR prints it;
# bash bench/device/prebuilt_key.sh DEVICE_DIR ARCHIVE exits 0 where ARCHIVE was built
# from these sources (1 where it was not, or is missing).
set -euo pipefail
key=$(cat "$1/ggml/.pyggml-tree.json" vendor/ggml/pin.json patches/*.patch CMakeLists.txt \
          cmake/build_info.json.in \
          pyggml/_build.py pyggml/cdefs/*.h pyggml/cdefs/*.c | sha256sum | cut -c1-64)
if [ $# -lt 2 ]; then
    echo "$key"
else
    [ -e "$2" ] && [ "$(tar xJf "$2" -O pyggml/prebuilt-key)" = "$key" ]
fi

#!/usr/bin/env bash
# What a device call with `carry: [DIR]` sends (the checkout's tracked and untracked files
# git does not ignore, and DIR) against the tool's limit of 64 MiB; exit 1 if over.
# Usage: bash bench/device/travel_size.sh DIR, from the checkout.
set -euo pipefail
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
carried=$(du -sb "$1" | cut -f1)
limit=$((64 << 20))
echo "travels: $(((tree + carried) >> 20)) MiB of $((limit >> 20)) (checkout $((tree >> 10)) KiB," \
     "$1 $((carried >> 10)) KiB)"
[ $((tree + carried)) -le $limit ] || { echo "over the device tool's limit" >&2; exit 1; }

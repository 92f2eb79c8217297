#!/usr/bin/env bash
# The README's GPU session on the GPU machine, its log and per-test times under $OUT/r.
#
#     run: bash benchmarks/device/gpu_session.sh    carry: [".whl", ".whl-peer", ".whl-zoo"]
cd "$(dirname "$0")/../.."
WHEELS="${WHEELS:-.whl .whl-peer .whl-zoo}"
source benchmarks/device/prologue.sh
PYTHONPATH=/tmp/site LUCID_TEST_TIMES=$R/times.tsv timeout "${LIMIT:-400}" \
  python3 -m nox -s gpu-3.12-torch2.11 -- -rfEs "$@" > "$R/nox.log" 2>&1
log "nox rc $?"
tail -40 "$R/nox.log" > "$R/nox-tail.txt"
pack

#!/usr/bin/env bash
# The step profile (benchmarks/step_profile.py) on the GPU machine: SCALES, TASKS, BATCH, SIDES,
# under a LIMIT in seconds; its markdown and json under $OUT/r/step-BATCH.
#
#     run: SCALES=s BATCH=16 bash benchmarks/device/step_profile.sh    carry: [".whl", ".whl-peer"]
cd "$(dirname "$0")/../.."
WHEELS="${WHEELS:-.whl .whl-peer}"
source benchmarks/device/prologue.sh
timeout "${LIMIT:-240}" python3 benchmarks/step_profile.py --out "$R/step-${BATCH:-16}" \
  --scales "${SCALES:-s}" --tasks "${TASKS:-detect,segment}" --batch "${BATCH:-16}" --size 640 \
  --sides "${SIDES:-ours_eager,ours_capture,peer}" --warmup 6 --steps 15 --profiled 2 \
  > "$R/step-${BATCH:-16}.log" 2>&1
log "step profile rc $?"
pack

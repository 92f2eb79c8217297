#!/usr/bin/env bash
# Speed rows (benchmarks/peer_speed.py), one row after another while the call has time left:
# ROWS is a list of task:scale, BATCH the batch, SIDES the sides of an n or s row, BIG_SIDES those
# of a larger one (default: the peer and the captured fit only, where a call has time for little
# else), FLAGS more `lucid fit` flags for every lucid side, TAG a suffix of the rows' folders.
#
#     run: ROWS="detect:s segment:s" BATCH=16 bash benchmarks/device/speed_rows.sh
#     carry: [".whl", ".whl-peer"]
cd "$(dirname "$0")/../.."
WHEELS="${WHEELS:-.whl .whl-peer}"
source benchmarks/device/prologue.sh
end=$(($(date +%s) + ${BUDGET:-540}))
for spec in ${ROWS:-detect:s segment:s pose:s obb:s detect:m detect:l detect:x}; do
  task=${spec%%:*} scale=${spec##*:}
  left=$((end - $(date +%s)))
  if [ "$left" -lt 100 ]; then log "skipped $spec: $left s left"; continue; fi
  sides=${SIDES:-peer,capture,eager,loader}
  [ "$scale" = n ] || [ "$scale" = s ] || sides=${BIG_SIDES:-peer,capture}
  row="$task-$scale-${BATCH:-16}${TAG:-}"
  timeout "$left" python3 benchmarks/peer_speed.py --out "$R/$row" --tasks "$task" \
    --scales "$scale" --batches "${BATCH:-16}" --epochs 3 --sides "$sides" --side-timeout 100 \
    --lucid-flags="${FLAGS:-}" > "$R/$row.log" 2>&1
  log "$spec rc $?"
  pack
done

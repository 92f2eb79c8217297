#!/usr/bin/env bash
# Both sides of several seeds at once on one held-out set (benchmarks/peer_accuracy.py): every
# fit of the call side by side, two loader workers each. The set is built on the CPU machine
# (the GPU machine has no scikit-image) and carried in .devcarry/sets:
#
#     here: python3 benchmarks/heldout_sets.py --cache .devcarry/sets --sets skimage-shapes
#     run:  TASK=segment SET=skimage-shapes SEEDS=3,4,5 bash benchmarks/device/accuracy_seeds.sh
#     carry: [".whl", ".whl-peer", ".devcarry"]
cd "$(dirname "$0")/../.."
WHEELS="${WHEELS:-.whl .whl-peer}"
source benchmarks/device/prologue.sh
python3 benchmarks/peer_accuracy.py --out "$R/acc" --work /tmp/accw --set-cache .devcarry/sets \
  --tasks "${TASK:-segment}" --sets "${SET:-skimage-shapes}" --arms auto --jobs 0 --workers 2 \
  --no-cross --seeds "${SEEDS:-3,4,5}" --side-timeout "${SIDE_TIMEOUT:-540}" \
  --timeout "${TIMEOUT:-560}" > "$R/acc.log" 2>&1
log "acc rc $?"
pack

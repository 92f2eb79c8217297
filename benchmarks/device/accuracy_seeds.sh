#!/usr/bin/env bash
# Both sides of several seeds at once on one held-out set (benchmarks/peer_accuracy.py): every
# fit of the call side by side, two loader workers each. The set is built on the CPU machine
# (the GPU machine has no scikit-image) and carried in .devcarry/sets:
#
#     here: python3 benchmarks/heldout_sets.py --cache .devcarry/sets --sets skimage-shapes
#     run:  TASK=segment SET=skimage-shapes SEEDS=3,4,5 bash benchmarks/device/accuracy_seeds.sh
#     carry: [".whl", ".whl-peer", ".devcarry"]
#
# Our arms alone, each seed paired with a committed run's peer (no peer trained; .whl carries
# all it needs):
#
#     run:  TASK=detect SET=skimage-shapes SEEDS=0,1,2,3,4,5,6,7 ARMS=auto+cpu \
#           PEER_FROM=docs/benchmarks/peer-accuracy/RUN.json bash benchmarks/device/accuracy_seeds.sh
cd "$(dirname "$0")/../.."
WHEELS="${WHEELS:-.whl .whl-peer}"
source benchmarks/device/prologue.sh
python3 benchmarks/peer_accuracy.py --out "$R/acc" --work /tmp/accw --set-cache .devcarry/sets \
  --tasks "${TASK:-segment}" --sets "${SET:-skimage-shapes}" --arms "${ARMS:-auto}" --jobs 0 --workers 2 \
  --no-cross --seeds "${SEEDS:-3,4,5}" --side-timeout "${SIDE_TIMEOUT:-540}" \
  --timeout "${TIMEOUT:-560}" ${PEER_FROM:+--peer-from $PEER_FROM} > "$R/acc.log" 2>&1
log "acc rc $?"
pack

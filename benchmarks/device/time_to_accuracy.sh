#!/usr/bin/env bash
# Time to accuracy on the held-out vsynth-2k (built here from its seed), both sides one at a
# time in one call: benchmarks/peer_accuracy.py, detect, 20 epochs, seed SEED (default 0).
#
#     run: SEED=1 bash benchmarks/device/time_to_accuracy.sh    carry: [".whl", ".whl-peer", ".whl-vs"]
cd "$(dirname "$0")/../.."
WHEELS="${WHEELS:-.whl .whl-peer .whl-vs}"
source benchmarks/device/prologue.sh
python3 benchmarks/heldout_sets.py --cache /tmp/sets --sets vsynth-2k > "$R/set.log" 2>&1
log "set rc $?"
python3 benchmarks/peer_accuracy.py --out "$R/acc" --work /tmp/accw --set-cache /tmp/sets \
  --tasks detect --sets vsynth-2k --arms auto --jobs 1 --workers 8 --no-cross \
  --seeds "${SEED:-0}" --side-timeout 290 --timeout "${TIMEOUT:-500}" > "$R/acc.log" 2>&1
log "acc rc $?"
pack

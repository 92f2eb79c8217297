#!/usr/bin/env bash
# Issue 14's measurement: both trainers, detect + segment, batch 16 and 64, one run.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl $(ls .whl-peer/*.whl | grep -v pycocotools) 2>&1 | tail -2
export PYTHONPATH=$(ls -d packages/*/src | paste -sd:):/tmp/site
git log --oneline -1 2>/dev/null || true
timeout 60 python3 .devrun/diag_sync.py > $OUT/diag.txt 2>&1; echo "diag rc=$?"; grep -n "Error\|lucid_\|synchron" $OUT/diag.txt | grep -v "^.*INFO" | head -30
timeout 490 python3 benchmarks/peer_speed.py --out $OUT/speed --tasks detect,segment --batches 16,64 \
  --epochs 3 --side-timeout 150 --font .whl-peer/Arial.ttf
echo "rc=$?"
cd $OUT/speed && ls | wc -l; mv peer-speed.json peer-speed.md $OUT/ ; tar czf $OUT/logs.tgz *.log *.json 2>/dev/null; cd $OUT && rm -rf speed && ls -la

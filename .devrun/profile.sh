#!/usr/bin/env bash
# Profile the main process of `lucid fit` (capture on) at 640: where the host time goes.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$(ls -d packages/*/src | paste -sd:):/tmp/site
W=/tmp/lucid-peer-speed
python3 - <<'PY'
import sys; sys.path.insert(0, "benchmarks")
from pathlib import Path
import peer_speed, time
for task in ("detect", "segment"):
    t = time.time(); peer_speed.make_set(Path("/tmp/lucid-peer-speed"), task, 1024); print(task, "set", round(time.time()-t,1), flush=True)
PY
run() { # task model batch epochs tag
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 250 > $OUT/$5-gpu.txt &
  SMI=$!
  timeout 200 python3 -m cProfile -o $OUT/$5.pstats -m lucid_train fit --model $2 --data.root $W/coco-$1 \
    --data.img_size 640 --data.batch_size $3 --data.num_workers 14 --trainer.max_epochs $4 \
    --trainer.check_val_every_n_epoch 99 --model.capture on --run.root /tmp/runs-$5 --run.name train > $OUT/$5.log 2>&1
  echo "$5 rc=$?"
  kill $SMI
  grep -h "train_images_per_s" -m1 /tmp/runs-$5/*/train/metrics.csv | head -1
  python3 - /tmp/runs-$5 <<'PY'
import csv, glob, sys
f = glob.glob(sys.argv[1] + "/*/train/metrics.csv")[0]
rows = [r for r in csv.DictReader(open(f)) if r.get("time/train_images_per_s")]
print([(r["epoch"], round(float(r["time/train_images_per_s"]), 1)) for r in rows])
PY
  python3 -c "
import pstats,sys
p=pstats.Stats('$OUT/$5.pstats'); p.sort_stats('tottime').print_stats(45); p.sort_stats('cumulative').print_stats(90)" > $OUT/$5-stats.txt 2>&1
}
run detect yolo26n 64 4 det64
run detect yolo26n 16 3 det16
run segment yolo26n-seg 16 3 seg16
run segment yolo26n-seg 64 3 seg64
ls -la $OUT

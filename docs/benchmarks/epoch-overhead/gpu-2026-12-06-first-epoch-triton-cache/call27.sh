# issue 34 / 37: a fit's first epoch on a fresh Triton cache (cold), the same cache again (warm), and another fresh cache with the host warm (cold2); 512 images at 320 / 16
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
D=$OUT/r; mkdir -p $D
date -u +%FT%TZ > $D/dates.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $D/dates.txt
export PYTHONPATH=$(ls -d $PWD/packages/*/src | paste -sd:):/tmp/site
(cd benchmarks && timeout 60 python3 -c "from pathlib import Path; import speed_set; speed_set.make_set(Path('/tmp/spc'), 'detect', 512)") > $D/set.log 2>&1; echo "set rc $?" >> $D/dates.txt
fit() {
  t0=$(date +%s.%N)
  LUCID_EPOCH_MARKS=$D/epochs-$1.jsonl TRITON_CACHE_DIR=$2 timeout 55 python3 -m lucid_train fit --model yolo26n --data.root /tmp/spc/coco-detect --data.img_size 320 --data.batch_size 16 --data.num_workers 8 --trainer.max_epochs 2 --trainer.precision 16-mixed --trainer.check_val_every_n_epoch 4 --run.root /tmp/fit-$1 --run.name train > $D/fit-$1.log 2>&1; rc=$?
  t1=$(date +%s.%N)
  echo "$1 rc $rc wall $(python3 -c "print(round($t1-$t0,1))") cubins $(find $2 -name '*.cubin' | wc -l)" >> $D/dates.txt
  grep -a "done in" $D/fit-$1.log >> $D/dates.txt
  cp $(find /tmp/fit-$1 -name metrics.csv | head -1) $D/metrics-$1.csv 2>/dev/null
}
fit cold /tmp/tc-fresh
fit warm /tmp/tc-fresh
fit cold2 /tmp/tc-fresh2
date -u +%FT%TZ >> $D/dates.txt; cat $D/dates.txt
cd $OUT && tar -czf r.tgz r && rm -rf r

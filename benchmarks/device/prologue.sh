# Sourced by the device scripts beside it, on the GPU machine, in the repository root: results go
# to $OUT/r (a log of times in dates.txt, packed into r.tgz after each step, so a call cut short
# still returns what it finished), the wheels named by WHEELS (default: .whl) are installed into
# /tmp/site, and the packages and the wheels are put on PYTHONPATH.
R=$OUT/r
mkdir -p "$R"
log() { echo "$(date +%H:%M:%S) $*" >> "$R/dates.txt"; }
pack() { (cd "$OUT" && tar czf r.tgz --exclude='*.ckpt' --exclude='runs-*' r 2>/dev/null) || true; }
log start
nvidia-smi -L >> "$R/dates.txt" 2>&1
for d in ${WHEELS:-.whl}; do
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site "$d"/*.whl \
    >> "$R/pip.log" 2>&1 || log "pip install of $d failed"
done
PYTHONPATH=/tmp/site:$(ls -d packages/*/src | paste -sd:)
export PYTHONPATH

# One device call (see prepare.sh, which makes .devrun/ and .whl/): the paper presets of 01 (seeds
# 0-1) and 05 (seed 0) on the GPU, published into book/results/paper/ and
# book/sweeps/<ch>/paper-seedN/; timed shape-only runs of 04, 05, 06, 08, 09; all back in $OUT.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-480}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
mkdir -p $OUT/logs
exec > >(tee $OUT/logs/main.log) 2>&1
nvidia-smi -L; nproc; python3 --version
python3 .devrun/check_tree.py || echo "TREE MISMATCH: results are not from the named commit"
export REPLICATE_GIT_COMMIT=$(cat .devrun/commit.txt)
source .devrun/prelude.sh   # wheels into /tmp/site, PYTHONPATH, Jupyter paths
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export TQDM_DISABLE=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
python3 .devrun/sanity.py || { echo "SANITY FAILED"; exit 3; }
echo "setup took $(( $(date +%s) - T0 )) s"
R="python3 -m replicate run"
job() {  # job NAME DEVICE ARGS...: one chapter run, its log and time
  local name=$1 dev=$2; shift 2
  local t=$(date +%s) l=$(left)
  if [ "$l" -lt 20 ]; then echo "SKIP $name (no time)"; return; fi
  REPLICATE_DEVICE=$dev timeout -k 5 $l $R "$@" > $OUT/logs/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t )) s on $dev" | tee -a $OUT/logs/times.txt
}
sw() { echo "--claims-dir book/sweeps/$1/paper-seed$2 --results-dir book/sweeps/$1/paper-seed$2 -p seed $2"; }
# GPU lanes: chapter 01 at three seeds, chapter 05's transformer at seed 0
job 01-s0 cuda 01_delayed_robustness --preset paper --publish &
for s in 1 2; do job 01-s$s cuda 01_delayed_robustness --preset paper $(sw 01_delayed_robustness $s) & done
job 05-s0 cuda 05_slingshot_hessian --preset paper --publish &
( for c in 09_progress_measures 04_grokalign_speedup 05_slingshot_hessian; do
    job $c-shape cuda $c --shape-only --claims-dir /tmp/shape/$c-a; done
  job 05-timed cuda 05_slingshot_hessian --shape-only -p cap 400 --claims-dir /tmp/shape/05-b
  job 09-timed cuda 09_progress_measures --shape-only -p cap 2000 -p mnist_steps 2000 --claims-dir /tmp/shape/09-b
  job 04-timed cuda 04_grokalign_speedup --shape-only -p max_steps 400 -p xor_steps 20 --claims-dir /tmp/shape/04-b ) &
( for c in 06_intrinsic_dimension 08_predicting_grokking; do
    job $c-shape cuda $c --shape-only --claims-dir /tmp/shape/$c-a; done
  job 06-timed cuda 06_intrinsic_dimension --shape-only -p steps "[2000, 2000, 2000]" --claims-dir /tmp/shape/06-b
  job 08-timed cuda 08_predicting_grokking --shape-only -p steps "[3000, 3000, 3000]" --claims-dir /tmp/shape/08-b ) &
( while sleep 60; do echo "--- $(( $(date +%s) - T0 )) s"; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; uptime; done ) > $OUT/logs/monitor.log 2>&1 &
MON=$!
wait $(jobs -p | grep -v "^$MON$") 2>/dev/null
kill $MON 2>/dev/null
echo "all jobs ended at $(( $(date +%s) - T0 )) s"
mkdir -p /tmp/pack/shape
for d in /tmp/shape/*; do [ -d "$d" ] && mkdir -p /tmp/pack/shape/$(basename $d) && cp $d/results/*.json /tmp/pack/shape/$(basename $d)/ 2>/dev/null; done
tar czf $OUT/results.tgz book/results/paper book/sweeps/*/paper-seed* -C /tmp/pack shape 2>/dev/null
ls -la $OUT; tar tzf $OUT/results.tgz | head -50

#!/bin/bash
# Ray Train and Tune on one GPU, as one call on a lent GPU machine without Ray or internet: Ray
# installed from the carried wheelhouse (cluster/wheelhouse.py), a Ray Train run on the GPU killed
# after its first checkpoint and resumed, a sweep of TRIALS (4) trials sharing the GPU
# (--gpus-per-worker 1/TRIALS, rounded down to the 1e-4 units Ray counts in) and one of two trials
# one at a time with the default packing, GPU memory per process sampled throughout. Carry the
# shards and the wheelhouse:
#
#   python -m hlgt.data.build --dataset mawps --fold 0 --mawps-folds graph2tree --no-ray --out shards/mawps-f0
#   python cluster/wheelhouse.py build --out wheelhouse --also pyyaml --have numpy,pandas,pyarrow,torch,python-dateutil,pytz,tzdata,grpcio
#
# (--have: what the lent H200's image holds; grpcio, 7 MB, whatever its version there: Ray asks
# for 1.42 or later, tensorboard there for 1.48.2. The smaller packages stay in, their versions
# there unknown: one 47 MiB part, so that it, the shards and the working tree fit one call's 64 MiB)
#   bash cluster/gpu_ray_check.sh            # there: logs and summary.md under $OUT
#
# Settings (environment): OUT (default gpu-ray-out), SHARDS (shards/mawps-f0), WHEELS (the first
# wheelhouse part; used only where Ray is missing), DATASET (mawps), MAWPS_FOLDS (graph2tree, the
# shards' fold scheme; read for MAWPS only), SET (--set overrides for every run, space-separated), EPOCHS (6, the
# Ray Train run), SWEEP_EPOCHS (3), TRIALS (4), STEPS ("train sweeps", or either), GPU (1; 0 runs
# every step on CPUs). tests/test_cluster.py runs
# it on the sample data with GPU=0.
set -u
OUT=${OUT:-gpu-ray-out}
SHARDS=${SHARDS:-shards/mawps-f0}
WHEELS=${WHEELS:-wheelhouse/wheels.tar.xz.part00}
DATASET=${DATASET:-mawps}
EPOCHS=${EPOCHS:-6}
SWEEP_EPOCHS=${SWEEP_EPOCHS:-3}
TRIALS=${TRIALS:-4}
STEPS=${STEPS:-train sweeps}
GPU=${GPU:-1}
MAWPS_FOLDS=${MAWPS_FOLDS:-graph2tree}
SET=${SET-}
RUNS=${RUNS:-/tmp/hlgt-ray-check}  # checkpoints stay on the machine; logs and summaries go to $OUT
mkdir -p "$OUT" "$RUNS"
# Logs unbuffered: a call cut at its time limit keeps every line written before.
export RAY_AUTH_MODE=disabled WANDB_MODE=offline PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
sets=(--no-wandb); [ "$DATASET" = mawps ] && sets+=(--mawps-folds "$MAWPS_FOLDS")
for kv in $SET; do sets+=(--set "$kv"); done
status=0
log() { echo "[gpu_ray_check] $*" >&2; echo "- $*" >> "$OUT/summary.md"; }
: > "$OUT/summary.md"

PY=python
if ! python -c "import ray" 2>/dev/null; then
  # Ray goes into python's own venv where python runs in one (the device's torch, pandas and pyarrow
  # live there; a venv made from it would see only the base interpreter's packages); elsewhere into
  # a venv that sees the system's packages.
  if ! python -c "import sys; sys.exit(sys.prefix == sys.base_prefix)"; then
    python -m venv --without-pip --system-site-packages /tmp/hlgt-ray-env
    PY=/tmp/hlgt-ray-env/bin/python
  fi
  start=$SECONDS
  $PY cluster/wheelhouse.py install "$WHEELS" > "$OUT/install.log" 2>&1 || { log "Ray install FAILED (install.log)"; exit 1; }
  log "Ray installed from $WHEELS in $((SECONDS - start)) s"
fi
# Every Ray this script starts keeps its session under its own RAY_TMPDIR, which its head processes
# name on their command lines: ray_stop stops those and leaves any other Ray on the machine running
# (`ray stop` would stop them all). Their workers exit when their raylet goes.
export RAY_TMPDIR
RAY_TMPDIR=$(mktemp -d /tmp/hlgt-rc.XXXXXX)
ray_stop() {
  pkill -TERM -f "$RAY_TMPDIR" 2> /dev/null && sleep 2
  pkill -KILL -f "$RAY_TMPDIR" 2> /dev/null || true
}
trap 'ray_stop; rm -rf "$RAY_TMPDIR"' EXIT
if [ "$GPU" = 1 ] && command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader,nounits -l 1 > "$OUT/gpu_apps.csv" 2>&1 &
  smi=$!
fi
gpu_flag=(); [ "$GPU" = 1 ] && gpu_flag=(--gpu)

# 1. Ray Train on the GPU: killed after its first checkpoint, then the same command resumes it.
if [[ " $STEPS " == *" train "* ]]; then
  train=($PY -m hlgt.train --dataset "$DATASET" --shards "$SHARDS" --workers 1 "${gpu_flag[@]}" \
         --set "train.epochs=$EPOCHS" "${sets[@]}" --name ray-gpu --storage "$RUNS")
  rm -rf "$RUNS/ray-gpu"
  start=$SECONDS
  "${train[@]}" > "$OUT/train_killed.log" 2>&1 &
  pid=$!
  while kill -0 $pid 2> /dev/null && ! ls -d "$RUNS"/ray-gpu/checkpoint_*/ > /dev/null 2>&1; do sleep 0.5; done
  sleep 1
  if kill -0 $pid 2> /dev/null; then
    kill -9 $pid; wait $pid 2> /dev/null; ray_stop
    log "Ray Train run killed after its first checkpoint, $((SECONDS - start)) s in"
  else
    log "Ray Train run ended before it could be killed (train_killed.log)"; status=1
  fi
  start=$SECONDS
  "${train[@]}" > "$OUT/train_resumed.log" 2>&1 || status=1
  ray_stop
  $PY - "$RUNS/ray-gpu" >> "$OUT/summary.md" 2>&1 <<'PY' || status=1
import json, sys
from pathlib import Path
from hlgt.train.checkpoint import read_checkpoint
run = Path(sys.argv[1])
latest = max((p for p in run.glob("checkpoint_*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
state = read_checkpoint(latest)
epochs = [m["epoch"] for m in state["history"]]
print(f"- resumed run: starts after epochs {state['starts']}, epochs {epochs}, finished {state['finished']}; "
      f"test value accuracy {json.loads((run / 'results.json').read_text()).get('test/value_acc')}")
if not (state["finished"] and len(state["starts"]) > 1 and state["starts"][-1] >= 1):
    sys.exit("the re-run did not continue from a checkpoint")
PY
  log "resumed run took $((SECONDS - start)) s"
fi

# 2. Sweeps: TRIALS trials sharing the GPU, then two (at most TRIALS) one at a time with the default packing.
sweep() {  # name, log, flags...
  local name=$1 logfile=$2; shift 2
  local start
  start=$(date +%s.%N)
  $PY tune/sweep.py --dataset "$DATASET" --shards "$SHARDS" --ablation no_line_graph --no-reference --scheduler fifo \
    --set "train.epochs=$SWEEP_EPOCHS" "${sets[@]}" --storage "$RUNS/sweeps" --name "$name" --fresh "$@" \
    > "$OUT/$logfile" 2>&1 || status=1
  ray_stop
  local n
  n=$(grep -c "^\[sweep\] .* finished$" "$OUT/$logfile")  # epoch_lines: one per trial that ended
  log "sweep $name: $(awk -v n="$n" -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {
    printf "%d trials finished in %.1f s (%.1f trials/hour)", n, b - a, (b > a ? n * 3600 / (b - a) : 0)}')"
}
if [[ " $STEPS " == *" sweeps "* ]]; then
  if [ "$GPU" = 1 ]; then
    sweep shared-gpu sweep_shared.log --num-samples "$TRIALS" --gpus-per-worker "$($PY -c "from hlgt.sweep.experiments import gpu_share; print(gpu_share($TRIALS))")"
  else
    sweep shared-gpu sweep_shared.log --num-samples "$TRIALS" --gpus-per-worker 0  # as many at once as the CPUs hold
  fi
  sweep one-at-a-time sweep_one.log --num-samples "$(( TRIALS < 2 ? TRIALS : 2 ))" --max-concurrent 1
  grep -h "per GPU" "$OUT"/sweep_*.log >> "$OUT/summary.md"
fi

if [ -n "${smi:-}" ]; then
  kill $smi
  awk -F', ' '$3 > m[$2] {m[$2] = $3} END {for (p in m) print "- GPU memory of process " p ": " m[p] " MiB at most"}' \
    "$OUT/gpu_apps.csv" >> "$OUT/summary.md"
fi
cat "$OUT/summary.md" >&2
exit $status

#!/bin/bash
# The GPU checks of the open issues, as one call on a lent GPU machine without Ray or internet
# (torch with CUDA, torch-geometric, pyarrow). Build the shards on a machine with the annotator
# first and carry them:
#
#   python -m hlgt.data.build --dataset math23k --no-ray        # here: datasets/processed/math23k-offline
#   bash cluster/gpu_check.sh                                   # there: logs under $OUT
#
# Every call first writes $OUT/machine.txt (nvidia-smi, torch and CUDA) and $OUT/pip_freeze.txt.
# STEPS (default "probe curves speed profile replay recurrence bigrus graphs compiled"; `schedule` only when named), run
# in the order given (the most wanted first: a call cut short keeps the logs of the steps before),
# each one's log under $OUT:
#   probe     the sweep's GPU memory probe: trials per GPU, without and with train.cuda_graphs
#             (trials_per_gpu.txt)
#   curves    `gts` and `full` side by side on the whole training split, MINUTES each (curve.log, curve/)
#   speed     training and decoding problems/s of `full` and `gts`, with BEFORE's code first, SPEED_ARGS
#             passed to both (bench*.txt)
#   profile   wall time per training step against the GPU's kernel time, and the operators that take
#             the most of each, the step as the schedule trains it: train.cuda_graphs=GRAPHS,
#             train.capture_bigrus=BIGRUS (time_steps.txt)
#   replay    one batch's step eager, then captured as a CUDA graph and replayed: the floor of a step
#             without host work (replay.txt)
#   recurrence  the encoder's BiGRUs alone over PROFILE_STEPS padded batches: eager, and captured over
#             each batch's packing or as causal passes over padded lengths (recurrence.txt)
#   bigrus    the speed with train.cuda_graphs=true, without and with train.capture_bigrus=true (the
#             BiGRUs replayed too) in the same call, and what a capture costs beyond its step
#             (bench_graphs.txt, bench_bigrus.txt)
#   graphs    the speed with train.cuda_graphs=true (bench_graphs.txt), and three epochs of `full` and
#             `gts` trained eagerly, with it and with train.capture_bigrus too at dropout 0, whose
#             losses should agree, `full` eagerly twice: how far two eager runs drift apart on the
#             card (graphs_check.txt)
#   compiled  the speed with train.compile=true (compiling takes minutes: last) (bench_compiled.txt),
#             and its step replayed as a CUDA graph (replay_compiled.txt)
#   schedule  the paper's whole schedule (`python -m hlgt.train`: every training problem, the dataset's
#             epochs, validation every EVAL_EVERY epochs, the best model tested), SCHEDULE_ARMS side by
#             side, train.cuda_graphs=GRAPHS and train.capture_bigrus=BIGRUS, each stopped after the
#             epoch that crosses SCHEDULE_MINUTES
#             (schedule_<arm>.log, its results schedule_<arm>.json, its epochs' metrics
#             schedule_<arm>_metrics.jsonl, its test predictions schedule_<arm>_predictions_test.jsonl
#             for hlgt.train.compare); RESUME=true goes on with the run folders of an earlier call on
#             the same warm machine, from their last epochs
#
# Settings (environment): OUT (default gpu-out), DEVICE (cuda), DATASET (math23k), SHARDS (its
# offline shard folder), MINUTES (training budget per arm, default 6), LIMIT (problems timed, 3200),
# BATCH (64, the paper's), BEFORE (a folder holding an older commit's `hlgt` package, made with
# `mkdir before && git archive COMMIT hlgt | tar -x -C before`: its speed is timed first, on the
# same card in the same call), PROFILE_STEPS (10), SCHEDULE_ARMS ("full gts": arms sharing a GPU
# share its time), SCHEDULE_MINUTES (8), EVAL_EVERY (5), SPEED_ARGS (none; e.g. "--set
# train.cuda_graphs=true"), GRAPHS (true on a GPU, else false), BIGRUS (false), RUNS (the schedule's run folders,
# runs/gpu-check: ignored, so a warm machine keeps them between calls), RESUME (false). DEVICE=cpu
# DATASET=sample MINUTES=0.3 LIMIT=64 BATCH=16 runs the steps on the CPU in a minute
# (tests/test_cluster.py).
set -u
OUT=${OUT:-gpu-out}
DEVICE=${DEVICE:-cuda}
DATASET=${DATASET:-math23k}
SHARDS=$(realpath -m "${SHARDS:-datasets/processed/${DATASET}-offline}")
MINUTES=${MINUTES:-6}
LIMIT=${LIMIT:-3200}
BATCH=${BATCH:-64}
PROFILE_STEPS=${PROFILE_STEPS:-10}
STEPS=${STEPS:-probe curves speed profile replay recurrence bigrus graphs compiled}
SCHEDULE_ARMS=${SCHEDULE_ARMS:-full gts}
SCHEDULE_MINUTES=${SCHEDULE_MINUTES:-8}
EVAL_EVERY=${EVAL_EVERY:-5}
GRAPHS=${GRAPHS:-$([ "$DEVICE" = cuda ] && echo true || echo false)}
BIGRUS=${BIGRUS:-false}
RUNS=$(realpath -m "${RUNS:-runs/gpu-check}")  # model folders stay on the machine; logs and results go to $OUT
RESUME=${RESUME:-false}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
status=0
# Logs unbuffered: a call cut at its time limit keeps every line written before; a one-line error
# (hlgt's command line) keeps its traceback, for a failure seen only on the GPU.
export PYTHONUNBUFFERED=1 HLGT_DEBUG=1
{ nvidia-smi || true; python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } \
  > "$OUT/machine.txt" 2>&1
python -m pip list --format=freeze > "$OUT/pip_freeze.txt" 2>&1 || true  # what a carried wheelhouse can rely on

step_probe() {
  echo "[gpu_check] the sweep's GPU memory probe: trials per GPU" >&2
  DATASET="$DATASET" SHARDS="$SHARDS" python - > "$OUT/trials_per_gpu.txt" 2>&1 <<'PY' || status=1
import os, torch
from hlgt.sweep.experiments import probe_gpu_memory, trials_per_gpu
from hlgt.sweep.spec import SweepSpec
if torch.cuda.is_available():
    for graphs in (False, True):  # with train.cuda_graphs, every shape's captured graphs count
        spec = SweepSpec(name="probe", storage="/tmp", base={"data.dataset": os.environ["DATASET"], "train.cuda_graphs": graphs},
                    arms=["full", "gts"], samples=[{}], replicates=[{"data.fold": 0, "train.seed": 1}],
                    shards={0: os.environ["SHARDS"]})
        peak, total = probe_gpu_memory(spec)
        print(f"train.cuda_graphs={graphs}: peak reserved {peak / 2**30:.2f} GiB of {total / 2**30:.1f} GiB: "
              f"{trials_per_gpu(total, peak)} trials per GPU")
else:
    print("no CUDA device: probe skipped")
PY
  tail -2 "$OUT/trials_per_gpu.txt" >&2
}

step_curves() {
  echo "[gpu_check] learning curves: gts and full side by side, ${MINUTES} min each" >&2
  python -m hlgt.train.curve --dataset "$DATASET" --shards "$SHARDS" --device "$DEVICE" --epochs 80 \
    --limit 1000000 --ablation gts,full --jobs 2 --set "train.max_minutes=$MINUTES" --set "train.batch_size=$BATCH" \
    --out "$OUT/curve" > "$OUT/curve.log" 2>&1 || status=1
  tail -12 "$OUT/curve.log" >&2
}

bench() {  # training and decoding speed of full and gts, with the hlgt package of the current folder
  python -m hlgt.train.bench --dataset "$DATASET" --shards "$SHARDS" --device "$DEVICE" --limit "$LIMIT" \
    --batch-size "$BATCH" --decode-limit 64 --ablation full,gts "$@"
}
step_speed() {
  if [ -n "${BEFORE:-}" ]; then
    echo "[gpu_check] speed of the code in $BEFORE: full and gts" >&2
    (cd "$BEFORE" && bench ${SPEED_ARGS:-}) > "$OUT/bench_before.txt" 2>&1 || status=1
    tail -4 "$OUT/bench_before.txt" >&2
  fi
  echo "[gpu_check] speed: full and gts, same card, same call" >&2
  bench ${SPEED_ARGS:-} > "$OUT/bench.txt" 2>&1 || status=1
  tail -4 "$OUT/bench.txt" >&2
}
step_profile() {
  echo "[gpu_check] wall time per step against the GPU's kernel time ($PROFILE_STEPS steps), cuda graphs $GRAPHS," \
    "BiGRUs captured $BIGRUS" >&2
  bench --time-steps "$PROFILE_STEPS" --set "train.cuda_graphs=$GRAPHS" --set "train.capture_bigrus=$BIGRUS" \
    > "$OUT/time_steps.txt" 2>&1 || { status=1; tail -3 "$OUT/time_steps.txt" >&2; }
  grep -E "ms per step|profiled steps" "$OUT/time_steps.txt" >&2
}
captured() {  # NAME FILE BENCH_ARGS...: a bench mode that captures CUDA graphs, skipped without a GPU
  local name=$1 file=$2
  shift 2
  if [ "$DEVICE" = cuda ]; then
    bench "$@" > "$OUT/$file" 2>&1 || status=1
  else
    echo "$name skipped: capturing CUDA graphs needs DEVICE=cuda" > "$OUT/$file"
  fi
}
step_replay() {
  echo "[gpu_check] one batch's step eager and replayed as a CUDA graph ($PROFILE_STEPS steps each)" >&2
  captured replay replay.txt --replay "$PROFILE_STEPS"
  grep -E "replayed|capture failed|skipped" "$OUT/replay.txt" >&2
}
step_recurrence() {
  echo "[gpu_check] the BiGRUs alone: eager, captured over each packing, as causal passes ($PROFILE_STEPS batches)" >&2
  captured recurrence recurrence.txt --recurrence "$PROFILE_STEPS"
  grep -E "ms per batch|lengths|skipped" "$OUT/recurrence.txt" >&2
}
step_bigrus() {
  echo "[gpu_check] speed with train.cuda_graphs=true, without and with the BiGRUs captured" >&2
  captured bigrus bench_graphs.txt --set train.cuda_graphs=true
  captured bigrus bench_bigrus.txt --set train.cuda_graphs=true --set train.capture_bigrus=true
  for f in bench_graphs.txt bench_bigrus.txt; do grep -E "^\[bench\] (full|gts):|skipped" "$OUT/$f" >&2; done
}
step_graphs() {
  echo "[gpu_check] speed with train.cuda_graphs=true; training eagerly, with it and with the BiGRUs captured too" >&2
  if [ "$DEVICE" = cuda ]; then
    bench --set train.cuda_graphs=true > "$OUT/bench_graphs.txt" 2>&1 || status=1
    tail -4 "$OUT/bench_graphs.txt" >&2
    # The training loop itself, each arm with and without the graphs on the same problems: every
    # epoch's losses should agree up to float rounding; `full` twice eagerly (its graph layers sum with
    # atomic adds) says how far float rounding alone moves them.
    local runs="full,full+train.cuda_graphs=false,full+train.cuda_graphs=true,gts,gts+train.cuda_graphs=true"
    runs+=",full+train.cuda_graphs=true+train.capture_bigrus=true,gts+train.cuda_graphs=true+train.capture_bigrus=true"
    python -m hlgt.train.curve --dataset "$DATASET" --shards "$SHARDS" --device cuda --limit 1920 --val-limit 64 \
      --epochs 3 --jobs 7 --ablation "$runs" --set model.dropout=0 --set "train.batch_size=$BATCH" > "$OUT/graphs_check.txt" 2>&1 || status=1
    grep -E "^\| [0-9]+ \||cuda graphs" "$OUT/graphs_check.txt" >&2
  else
    echo "graphs skipped: capturing CUDA graphs needs DEVICE=cuda" > "$OUT/bench_graphs.txt"
  fi
}
step_compiled() {
  echo "[gpu_check] speed with train.compile=true (decoder levels and graph layers compiled)" >&2
  bench --set train.compile=true > "$OUT/bench_compiled.txt" 2>&1 || status=1
  tail -4 "$OUT/bench_compiled.txt" >&2
  if [ "$DEVICE" = cuda ]; then  # the compiler's cache makes this second compile shorter
    bench --replay "$PROFILE_STEPS" --set train.compile=true > "$OUT/replay_compiled.txt" 2>&1 || status=1
    grep -E "replayed|capture failed" "$OUT/replay_compiled.txt" >&2
  fi
}
step_schedule() {
  echo "[gpu_check] the whole schedule: $SCHEDULE_ARMS side by side, cuda graphs $GRAPHS, BiGRUs captured $BIGRUS," \
    "${SCHEDULE_MINUTES} min each, resumed: $RESUME" >&2
  gpu=(); [ "$DEVICE" = cuda ] && gpu=(--gpu)
  fresh=(--fresh); [ "$RESUME" = true ] && fresh=()  # without --fresh a run goes on from its last checkpoint
  pids=()
  for arm in $SCHEDULE_ARMS; do
    python -m hlgt.train --dataset "$DATASET" --shards "$SHARDS" --no-ray "${gpu[@]}" --no-wandb "${fresh[@]}" --ablation "$arm" \
      --name "schedule-$arm" --storage "$RUNS" --set "train.batch_size=$BATCH" \
      --set "train.cuda_graphs=$GRAPHS" --set "train.capture_bigrus=$BIGRUS" --set "train.eval_every=$EVAL_EVERY" \
      --set "train.max_minutes=$SCHEDULE_MINUTES" \
      >> "$OUT/schedule_$arm.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  for arm in $SCHEDULE_ARMS; do
    cp "$RUNS/schedule-$arm/results.json" "$OUT/schedule_$arm.json" 2> /dev/null || status=1
    cp "$RUNS/schedule-$arm/metrics.jsonl" "$OUT/schedule_${arm}_metrics.jsonl" 2> /dev/null || status=1
    # the test predictions pair this run with another of the same data in hlgt.train.compare
    cp "$RUNS/schedule-$arm/predictions_test.jsonl" "$OUT/schedule_${arm}_predictions_test.jsonl" 2> /dev/null || status=1
    grep -E "^epoch|cuda graphs|max_minutes|\[train\] done" "$OUT/schedule_$arm.log" | tail -4 >&2
  done
}
for name in $STEPS; do  # in the order given
  if declare -F "step_$name" > /dev/null; then
    "step_$name"
  else
    echo "[gpu_check] no step named $name; the steps:" $(declare -F | sed -n 's/^declare -f step_//p') >&2
    status=1
  fi
done
exit $status

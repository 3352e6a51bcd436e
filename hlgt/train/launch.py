"""Ray Train: the ``TorchTrainer`` whose worker loop is ``hlgt.train.loop.train``.

Not a copy of the loop: ``worker_loop`` builds a ``loop.Runtime`` from the Ray Train context
(rank, device, DDP through ``prepare_model`` — gloo on CPU, NCCL on GPU —, this worker's shard of
the training Parquet through Ray Data, the whole validation split on every rank (each decodes a
slice of it) and test on rank 0, every split read in its files' order) and a ``report`` that
forwards to ``ray.train.report``; then it calls the loop.

Checkpoints: rank 0 writes one every epoch (model, optimizer, scheduler, epoch, config,
vocabulary: see checkpoint.py); Ray keeps the best ``keep`` by validation value accuracy plus the latest.
Resume: a stopped or failed run re-run with the same ``name`` and ``storage`` continues from its
latest checkpoint (``ray.train.get_checkpoint()``); worker failures are retried
(``FailureConfig(max_failures)``). Storage is a local folder by default, any path Ray accepts
(S3, NFS) on a cluster. A sweep's trials (``hlgt.sweep.experiments``) each run one ``fit``.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hlgt import metrics as M
from hlgt.config import Config
from hlgt.data.collate import encode
from hlgt.data.shards import load_manifest, load_vocab
from hlgt.data.vocab import Vocab
from hlgt.storage import filesystem, is_uri
from hlgt.train import loop, tracking
from hlgt.train.checkpoint import publish, publish_remote
from hlgt.train.step import epoch_batches

# Ray is imported where it is used: `--no-ray` training imports this module without it, and the GPU
# machines of cluster/gpu_check.sh have no Ray.

SPLITS = ("train", "valid", "test")


def ray_available() -> bool:
    try:
        import ray.train.torch  # noqa: F401
    except ImportError:
        return False
    return True


def worker_cpus(workers: int, requested: float | None = None) -> float:
    """CPUs per training worker, leaving one CPU of the cluster free for Ray Data's read tasks.

    Ray Data reads the shards with 1-CPU tasks: when the training workers hold every CPU the
    reads never schedule and the run hangs. ``requested=None`` fits the workers into what is left
    (a fraction of a CPU each when needed, e.g. 0.5 for 2 workers on a 2-CPU laptop); an
    explicit request that leaves no CPU free is an error, not a hang.
    """
    import ray

    total = ray.cluster_resources().get("CPU", 0.0)
    spare = total - 1.0
    if spare <= 0:
        raise ValueError(f"the Ray cluster has {total:g} CPU(s); "
                           "training workers and Ray Data's readers need at least 2")
    if requested is None:
        return min(1.0, spare / workers)
    if workers * requested > spare + 1e-9:
        raise ValueError(f"{workers} worker(s) x {requested:g} CPU leave none of the cluster's {total:g} CPUs to Ray "
                         f"Data's read tasks, and the run would hang: use at most "
                         f"{math.floor(spare / workers * 1000) / 1000:g} CPU per worker")  # down: it must fit
    return requested


def available_splits(built: dict) -> list[str]:
    """The splits of a shard folder's manifest (its ``splits``) that hold at least one row."""
    return [s for s in SPLITS if built.get(s, {}).get("kept", 0) > 0]


def worker_loop(config: dict) -> dict:
    """The per-worker function of the TorchTrainer: a ``Runtime`` from the Ray context, then the loop."""
    import ray.train

    cfg = Config.from_flat(config["cfg"])
    vocab = Vocab.from_dict(config["vocab"])
    kwargs = dict(report=_report, runtime=_ray_runtime(cfg, vocab, config["splits"]), vocab=vocab,
                  run_name=config["run_name"], group=config.get("group"), wandb_dir=config.get("wandb_dir"),
                  wandb_mode=config.get("wandb_mode"), evaluate_test=config.get("evaluate_test", True))
    start = ray.train.get_checkpoint()
    if start is None:
        return loop.train(cfg, config["shards_dir"], **kwargs).metrics
    with start.as_directory() as directory:
        return loop.train(cfg, config["shards_dir"], resume_from=directory, **kwargs).metrics


def _report(metrics: dict, checkpoint_dir: Path | None) -> None:
    import ray.train

    checkpoint = ray.train.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None
    ray.train.report(metrics, checkpoint=checkpoint)


def _ray_runtime(cfg: Config, vocab, splits: list[str]) -> loop.Runtime:
    """The loop's ``Runtime`` on this Ray Train worker: its rank and device, DDP through
    ``prepare_model``, its Ray Data shard of the training split, the evaluation splits, and the
    collectives between the workers."""
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    shard_rows: list = []  # encoded for the vocabulary once, collated every epoch

    def read_rows(split: str) -> list[dict]:
        """This worker's Ray Data shard of ``split`` (the whole split when it is not split)."""
        shard = ray.train.get_dataset_shard(split)
        return [r for t in shard.iter_batches(batch_size=4096, batch_format="pyarrow") for r in t.to_pylist()]

    def train_batches(epoch: int):
        # Each worker reads its own shard through Ray Data once (DataConfig splits "train" only,
        # equal sizes, so every rank runs the same number of DDP steps) and keeps it: the read
        # pipeline would otherwise run again every epoch, on the worker's CPU, and a full shuffle
        # of the kept shard per epoch mixes better than a local shuffle buffer.
        if not shard_rows:
            shard_rows.extend(encode(read_rows("train"), vocab))
        return epoch_batches(shard_rows, vocab, cfg, epoch)

    def all_reduce(t: torch.Tensor) -> torch.Tensor:
        if world == 1 or not dist.is_initialized():
            return t
        moved = t.to(device)
        dist.all_reduce(moved)
        return moved.cpu()

    def gather(obj) -> list:
        if world == 1 or not dist.is_initialized():
            return [obj]
        out: list = [None] * world
        dist.all_gather_object(out, obj)
        return out

    def wrap(model):
        # find_unused_parameters only where a batch can leave parameters idle (HGTConv's weights
        # of absent types): the search walks the autograd graph every step.
        # Gradients as views of the all-reduce buckets save two copies of every gradient per step.
        kwargs = {"find_unused_parameters": not model.uses_every_parameter, "gradient_as_bucket_view": True}
        return ray.train.torch.prepare_model(model, parallel_strategy_kwargs=kwargs)

    # Ray Train tees print() to stdout and its logger (doubling every line); log through logging.
    return loop.Runtime(rank=rank, world_size=world, device=device, wrap_model=wrap, train_batches=train_batches,
                        eval_rows=lambda split: read_rows(split) if split in splits else [], all_reduce=all_reduce,
                        gather=gather, log=logging.getLogger("hlgt.train").info)


def make_trainer(cfg: Config, shards_dir: str | Path, *, name: str, storage: str, workers: int | None = None,
                 cpus_per_worker: float | None = None, gpus_per_worker: float | None = None, keep: int = 2,
                 max_failures: int = 1, placement_strategy: str = "PACK", callbacks: list | None = None,
                 group: str | None = None, wandb_dir: str | None = None, evaluate_test: bool = True):
    """The TorchTrainer for one training run of ``cfg`` (datasets read lazily by Ray Data)."""
    import ray.data
    import ray.train
    from ray.train.torch import TorchTrainer

    workers = workers or cfg.train.workers
    use_gpu = cfg.train.use_gpu
    resources: dict[str, float] = {"CPU": worker_cpus(workers, cpus_per_worker)}
    if use_gpu:
        resources["GPU"] = gpus_per_worker if gpus_per_worker is not None else 1.0
    # Workers on other nodes read the same shared path, or the URI (s3://...).
    shards_dir = str(shards_dir).rstrip("/") if is_uri(shards_dir) else str(Path(shards_dir).resolve())
    built = load_manifest(shards_dir)["splits"]
    splits = available_splits(built)
    if "train" not in splits:
        raise ValueError(f"no training rows in {shards_dir}")
    # DataConfig splits the training rows into equal shares (every rank runs as many DDP steps),
    # dropping the remainder; each worker keeps its share for every epoch (``_ray_runtime``).
    kept = built["train"]["kept"]
    if kept < workers:
        raise ValueError(f"{workers} workers for {kept} training problems: each needs one at least")
    if kept % workers:
        print(f"[train] {workers} workers take equal shares of the {kept} training problems: {kept % workers} "
              f"left over are not trained on (Ray Data's equal split)", flush=True)
    ray.data.DataContext.get_current().enable_progress_bars = False  # per-epoch bars drown the progress lines
    # The manifest's shard files, in order: a folder may hold others (a copy over an older, larger
    # build), which the in-process loop and evaluation never read.
    datasets = {s: ray.data.read_parquet([f"{shards_dir}/{s}/{name}" for name in built[s]["shards"]]) for s in splits}
    wandb_mode = tracking.prepare_environment(cfg.train.wandb)  # the workers take it from loop_config
    loop_config = {
        "cfg": cfg.to_flat(), "vocab": load_vocab(shards_dir).to_dict(), "shards_dir": str(shards_dir),
        "splits": splits, "run_name": name, "group": group, "wandb_mode": wandb_mode,
        # Offline W&B runs go beside the run, or, when the run is at a URI, to the home folder of
        # the node rank 0 trains on (as a sweep's trials do): wandb writes local files.
        "wandb_dir": wandb_dir or (f"~/hlgt-wandb/{name}" if is_uri(storage) else str(Path(storage) / name)),
        "evaluate_test": evaluate_test,
    }
    return TorchTrainer(
        worker_loop,
        train_loop_config=loop_config,
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker=resources,
                                               placement_strategy=placement_strategy),
        run_config=ray.train.RunConfig(
            name=name,
            storage_path=storage,
            failure_config=ray.train.FailureConfig(max_failures=max_failures),
            # Without a validation split no report holds a score (the final one names none), so
            # checkpoints are kept by recency: the last epoch is the run's model then.
            checkpoint_config=ray.train.CheckpointConfig(
                num_to_keep=keep, checkpoint_score_attribute=M.VAL_VALUE_ACC if "valid" in splits else None,
                checkpoint_score_order="max"),
            callbacks=callbacks or [],
        ),
        datasets=datasets,
        dataset_config=ray.train.DataConfig(datasets_to_split=["train"], execution_options=ordered_ingest()),
    )


def ordered_ingest():
    """Ray Data's ingest options with the files' order kept: every worker reads the evaluation
    splits in one order (the ranks decode interleaved slices of it), and the training split's
    equal shares are the same on every start (a resumed run trains on what it trained on). By
    default Ray Data hands blocks on as their read tasks finish, one task per shard file."""
    import ray.train

    options = ray.train.DataConfig.default_ingest_options()
    options.preserve_order = True
    return options


def resumed_config(run_dir: str) -> dict | None:
    """The flat config of the newest checkpoint Ray Train keeps in the run folder ``run_dir`` (a
    local path or a URI; checkpoint names sort by time), the one a re-run resumes; None for a new run."""
    import pyarrow.fs

    fs, root = filesystem(run_dir)
    found = fs.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True))
    configs = [f"{i.path}/config.json" for i in found if i.base_name.startswith("checkpoint_")]
    kept = [c for c in sorted(configs) if fs.get_file_info(c).type == pyarrow.fs.FileType.File]
    if not kept:
        return None
    with fs.open_input_stream(kept[-1]) as f:
        try:
            return json.loads(f.read())
        except ValueError as error:
            raise ValueError(f"{kept[-1]} is damaged: {error}") from error


def worker_error(error: Exception) -> Exception:
    """The error of the lowest failing rank when it is one the loop raises for bad input (a damaged
    checkpoint, shards that do not fit: ``ValueError``, ``KeyError``, ``OSError``), for the command
    to say in one line; else Ray's ``error`` (its log already holds each worker's traceback)."""
    failures = getattr(error, "worker_failures", None) or {}
    first = failures[min(failures)] if failures else None
    return first if isinstance(first, (ValueError, KeyError, OSError)) else error


@dataclass
class FitResult:
    metrics: dict  # final metrics of rank 0 (best validation, test)
    checkpoint: str | None  # the final checkpoint (best/, predictions, tables)
    run_dir: str  # storage/name; for local storage the outputs are also published here
    error: BaseException | None


def fit(cfg: Config, shards_dir: str | Path, *, name: str, storage: str, raise_on_error: bool = True,
        **trainer_kwargs: Any) -> FitResult:
    """Run (or resume) the training run ``storage/name`` on the connected Ray cluster.

    A run that fails for good (worker failures beyond ``max_failures``) raises, or with
    ``raise_on_error=False`` returns its error; re-running the same name continues it.
    """
    import ray.train

    trainer = make_trainer(cfg, shards_dir, name=name, storage=storage, **trainer_kwargs)
    run_dir = f"{storage.rstrip('/')}/{name}"
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as e:
        if raise_on_error:
            raise worker_error(e) from e
        return FitResult(metrics={}, checkpoint=None, run_dir=run_dir, error=e)
    checkpoint = result.checkpoint.path if result.checkpoint is not None else None
    if checkpoint and is_uri(storage):
        publish_remote(result.checkpoint.filesystem, checkpoint)
    elif checkpoint:
        publish(Path(checkpoint), Path(run_dir))
    metrics = (result.return_value if isinstance(result.return_value, dict) and result.return_value
               else dict(result.metrics or {}))
    return FitResult(metrics=metrics, checkpoint=checkpoint, run_dir=run_dir, error=None)


"""Weights & Biases on rank 0 when enabled, a no-op ``Tracker`` otherwise.

One W&B run per training run (one per Tune trial), grouped by sweep and named by arm and trial:
the flat config, per-epoch metrics (the epoch is the step), and in the summary the final figures,
the per-problem predictions of the best model and (for the sweep's own summary run) the final
results tables.

Mode: ``WANDB_MODE`` when the user set it; else ``online`` when an API key is found; else
``offline``, written under a local folder (``<dir>/wandb/offline-run-*``) that ``wandb sync``
uploads later. ``train.wandb=false`` (``--no-wandb``) turns it off.

The API key: ``WANDB_API_KEY`` in the process's environment, else the key file
``~/.hlgt/wandb_api_key`` (``$HLGT_WANDB_KEY_FILE`` names another), which must be readable by its
owner only. On a cluster the key file is how the key reaches the nodes (``cluster/put_wandb_key.py``
puts it on the head, ``ray_cluster.yaml`` syncs it to the workers): a key passed in a Ray job's
environment would show in ``ray job list``. The key is read into this process's environment for
W&B; this module never copies it into a config, a log line or a file.

The model never imports this module; only the training loop and the sweep do.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

# wandb is imported only when a run logs to it: runs without W&B (and the GPU machines, which lack
# it) never load it.

KEY_FILE = "~/.hlgt/wandb_api_key"


def key_file() -> Path:
    return Path(os.environ.get("HLGT_WANDB_KEY_FILE") or KEY_FILE).expanduser()


def load_api_key() -> bool:
    """Whether an API key is in this process's environment, after reading the key file into it
    when ``WANDB_API_KEY`` is unset. A key file others can read is an error, not a silent use."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    path = key_file()
    if not path.is_file():
        return False
    if path.stat().st_mode & 0o077:
        raise PermissionError(f"{path} holds a W&B API key and is readable by others: chmod 600 {path}")
    key = path.read_text(encoding="utf-8").strip()
    if key:
        os.environ["WANDB_API_KEY"] = key
    return bool(key)


def resolve_mode(enabled: bool) -> str:
    """``disabled`` | ``online`` | ``offline`` (see the module docstring)."""
    if not enabled:
        return "disabled"
    has_key = load_api_key()
    explicit = os.environ.get("WANDB_MODE", "").strip().lower()
    if explicit:
        if explicit not in ("online", "offline", "disabled", "dryrun", "run"):
            raise ValueError(f"WANDB_MODE={explicit!r} is not one of online, offline, disabled")
        return {"dryrun": "offline", "run": "online"}.get(explicit, explicit)
    return "online" if has_key else "offline"


def prepare_environment(enabled: bool) -> str:
    """Resolve the mode and export it as ``WANDB_MODE`` for this process (Ray Train does not pass the
    variable on to its workers: they get the mode in their loop config)."""
    mode = resolve_mode(enabled)
    if mode != "disabled":
        os.environ["WANDB_MODE"] = mode
    return mode


def run_id(name: str, start_id: str | None = None) -> str:
    """A W&B run id: the run's name, and the id its fresh start drew (``start_id``), so that its
    resumes write to its W&B run and a run started over under the same name gets a run of its own."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "run"
    return f"{base[:110]}-{start_id}" if start_id else base[:120]  # 120: a run from before start ids


class Tracker:
    """The interface, and the disabled tracker: every call does nothing."""

    enabled = False

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        pass

    def summary(self, metrics: Mapping[str, Any]) -> None:
        pass

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        pass

    def log_predictions(self, key: str, scored: Sequence[Any]) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbTracker(Tracker):
    enabled = True

    def __init__(self, run) -> None:
        self._run = run

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        # Committed at once: with a step given, W&B would hold the row until the next step or
        # finish(), and a run stopped in between (a session's end, a lost node) would lose it.
        self._run.log(dict(metrics), step=step, commit=True)

    def summary(self, metrics: Mapping[str, Any]) -> None:
        for key, value in metrics.items():
            self._run.summary[key] = value

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """A final table, in the run's summary: in the history it would take the steps after the last
        epoch, which a run resumed after a time budget's stop logs its next epochs at."""
        import wandb

        self._run.summary[key] = wandb.Table(columns=list(columns), data=[list(r) for r in rows])

    def log_predictions(self, key: str, scored: Sequence[Any]) -> None:
        """Per-problem predictions (``evaluate.Scored``) as a W&B table."""
        columns = ["id", "text", "predicted", "gold", "values", "answer", "predicted_value",
                   "value_correct", "equation_correct", "n_numbers"]
        rows = []
        for s in scored:
            d = asdict(s)
            d["values"] = " ".join(f"{v:g}" for v in d["values"])
            rows.append([d[c] for c in columns])
        self.log_table(key, columns, rows)

    def finish(self) -> None:
        self._run.finish()


def start(config: Mapping[str, Any], *, enabled: bool, project: str, name: str, group: str | None,
          directory: str | Path, rank: int = 0, job_type: str = "train", mode: str | None = None,
          start_id: str | None = None) -> Tracker:
    """A tracker for this process: W&B on rank 0 when enabled, the no-op ``Tracker`` otherwise.

    ``mode`` forces a mode resolved elsewhere (the driver resolves it and passes it to workers);
    ``start_id``: the run's fresh start's (``run_id``).
    """
    mode = mode or resolve_mode(enabled)
    if rank != 0 or not enabled or mode == "disabled":
        return Tracker()
    if mode == "online":
        load_api_key()  # this node's key file: a worker's node is not the driver's
    import wandb

    directory = Path(directory).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=project,
        name=name,
        id=run_id(f"{group}-{name}" if group else name, start_id),
        group=group,
        job_type=job_type,
        config=dict(config),
        dir=str(directory),
        mode=mode,
        resume="allow",
        reinit="create_new",
    )
    return WandbTracker(run)

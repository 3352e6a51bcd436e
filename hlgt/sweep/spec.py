"""A sweep's specification (``SweepSpec``): everything a trial needs, decided before Ray starts.

Each trial is one (arm, sample, replicate): the base overrides, the arm's overrides
(``hlgt.config.ABLATIONS``), the sampled configuration and the replicate's fold and seed, in that
order. An arm trains only the samples that differ in what its model reads. The module also names
the sweep's Tune experiments (``experiments``: one per arm, or one for a table's arms) and the
schedulers a sweep may use (``SCHEDULERS``).
"""
from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hlgt.config import ABLATIONS, Config
from hlgt.data.build import ensure_shards
from hlgt.data.shards import use_shards
from hlgt.storage import check_owned, claim, filesystem, folder_kind, is_uri, remove_owned, sole_writer, write_text
from hlgt.sweep.space import describe

# The spec is checked before torch loads (seconds): the solver's weight formats and the checkpoint's
# keys are imported by the checks that need them, pyarrow's filesystems likewise.

SCHEDULERS = ("asha", "median", "fifo")  # what stops trials early (hlgt.sweep.schedulers)
SETTINGS_FILE = "sweep.json"  # in the sweep's root: what its trials train, checked when it is re-run
ARM_DATA_KEYS = ("data.graph",)  # the data settings an arm may set: every graph variant is in the same shards
RESULTS_COPY = "results"  # in a sweep's root on S3: the copy of its local results folder (``local_dir``)
SO_FAR = "so-far"  # in the sweep's results folder: the tables of the trials finished so far (``--so-far``)
TRIAL_FOLDER = re.compile(r"(?P<arm>\w+)-s(?P<sample>\d+)-r(?P<replicate>\d+)-(?P<trial_id>[^-/]+)")


@dataclass
class SweepSpec:
    name: str
    storage: str  # the sweep's root: <storage>/<name>/...
    base: dict[str, Any]  # flat overrides common to every trial
    arms: list[str]
    samples: list[dict]
    replicates: list[dict]  # {"data.fold": f, "train.seed": s}
    shards: dict[int, str] = field(default_factory=dict)  # fold → shard folder (build_shards)
    scheduler: str = "asha"
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float | None = 0.0  # None: decided when Ray is up (experiments.resolve_gpus)
    max_concurrent: int = 0
    max_failures: int = 1
    wandb: bool = True
    wandb_dir: str = "."  # where offline W&B runs are written (on the node running each trial's rank 0)
    replicate_kind: str = "seeds"  # what the replicates vary, for the table: seeds | folds | runs
    verbose: bool = False  # Tune's and the workers' own output on the console, not one line per epoch
    # (arm, sample, replicate) → the record of a trial tested before the storage was lost
    # (``hlgt.sweep.results.recorded_trials``): not trained again
    recorded: dict = field(default_factory=dict)

    @property
    def root(self) -> str:
        return f"{self.storage.rstrip('/')}/{self.name}"

    @property
    def train_storage(self) -> str:
        """Where the trials' Ray Train runs keep their checkpoints."""
        return f"{self.root}/train"

    @property
    def local_dir(self) -> Path:
        """Where the results table, chart and test predictions are written (local even when
        the Tune results go to S3: then copied to ``<root>/results``, ``RESULTS_COPY``)."""
        return Path(self.root) if not is_uri(self.root) else Path("runs") / "sweeps" / self.name

    @property
    def so_far_dir(self) -> Path:
        """Where ``--so-far`` writes the tables of the trials finished so far."""
        return self.local_dir / SO_FAR

    @property
    def validated(self) -> bool:
        """Whether the trials hold out validation (MAWPS without it: the literature's protocol,
        one configuration per arm, each trial's last epoch tested)."""
        return self.centre.data.mawps_valid

    @property
    def centre(self) -> Config:
        """The base configuration, before any arm, sample or replicate."""
        return Config.from_flat(self.base)

    def trial_flat(self, arm: str, sample: int, replicate: int) -> dict[str, Any]:
        return {**self.base, **ABLATIONS[arm], **self.samples[sample], **self.replicates[replicate]}

    def arm_params(self, arm: str, sample: int) -> dict[str, Any]:
        """The searched values of a sample that the arm's model reads (gts has no heads or layers)."""
        unread = Config.from_flat({**self.base, **ABLATIONS[arm], **self.samples[sample]}).unread_keys()
        return {k: v for k, v in self.samples[sample].items() if k not in unread}

    def arm_samples(self, arm: str) -> list[int]:
        """The samples an arm trains: the first of each group that is the same model for the arm,
        so no two trials of an arm train the same configuration."""
        seen: list[dict] = []
        keep = []
        for i in range(len(self.samples)):
            params = self.arm_params(arm, i)
            if params not in seen:
                seen.append(params)
                keep.append(i)
        return keep


TABLE_EXPERIMENT = "arms"  # the one experiment of a sweep without validation


def experiments(spec: SweepSpec) -> dict[str, list[str]]:
    """The sweep's Tune experiments, each named by its folder: the arms it trains."""
    if not spec.validated:
        return {TABLE_EXPERIMENT: list(spec.arms)}
    return {arm: [arm] for arm in spec.arms}


def trial_folder(arm: str, sample: int, replicate: int, trial_id: str) -> str:
    """A trial's name, and its folders': ``<arm>-s<sample>-r<replicate>-<trial id>``."""
    return f"{arm}-s{sample}-r{replicate}-{trial_id}"


def read_trial_folder(name: str) -> tuple[str, int, int] | None:
    """The arm, sample and replicate a ``trial_folder`` name stands for (None: not such a name)."""
    m = TRIAL_FOLDER.fullmatch(name)
    return (m["arm"], int(m["sample"]), int(m["replicate"])) if m else None


def check_trials(spec: SweepSpec) -> None:
    """Every trial's configuration, checked before Ray starts or a shard is built: ``ValueError``
    naming the trial (arm, sampled values, fold and seed) and the bad key."""
    for arm in spec.arms:
        other_data = sorted(k for k in ABLATIONS[arm] if k.startswith("data.") and k not in ARM_DATA_KEYS)
        if other_data:
            raise ValueError(f"arm {arm} sets {', '.join(other_data)}, which the sweep's shards (built once per fold "
                             "for every arm) do not vary: sweep it on its own")
    searched_data = sorted({k for params in spec.samples for k in params if k.startswith("data.")} - set(ARM_DATA_KEYS))
    if searched_data:
        raise ValueError(f"the search varies {', '.join(searched_data)}, which the sweep's shards (built once per "
                         "fold from the base settings) do not: every trial would train on the same shards; give it "
                         "with --set, one sweep per value")
    for arm in spec.arms:
        for sample, params in enumerate(spec.samples):
            for replicate, rep in enumerate(spec.replicates):
                try:
                    Config.from_flat(spec.trial_flat(arm, sample, replicate))  # from_flat checks
                except ValueError as e:
                    raise ValueError(f"trial {arm} {describe(params)} fold={rep['data.fold']} "
                                     f"seed={rep['train.seed']}: {e}") from None


def saved_weights_formats(spec: SweepSpec) -> dict[int, str]:
    """The weights formats of the models an earlier sweep of this name saved: format -> one folder
    holding it (empty when the sweep is new)."""
    import pyarrow.fs

    from hlgt.model.solver import CONFIG_FILE, WEIGHTS_FILE, stored_weights_format

    fs, root = filesystem(spec.root)  # a local absolute path or an S3 URI
    files = fs.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True, recursive=True))
    found: dict[int, str] = {}
    for f in files:
        if f.base_name != WEIGHTS_FILE:
            continue
        folder = f.path.rsplit("/", 1)[0]
        try:
            with fs.open_input_stream(f"{folder}/{CONFIG_FILE}") as config:
                found.setdefault(stored_weights_format(json.loads(config.read())), folder)
        except FileNotFoundError:  # a checkpoint cut short while being written: Tune resumes past it
            continue
    return found


def check_saved_weights(spec: SweepSpec) -> None:
    """Before a sweep resumes: ``ValueError`` when an earlier sweep of this name saved models of
    another weights format than this version computes (its finished trials would be kept, and
    their models could not be loaded for the test evaluation)."""
    from hlgt.model.solver import WEIGHTS_FORMAT

    stale = {fmt: folder for fmt, folder in saved_weights_formats(spec).items() if fmt != WEIGHTS_FORMAT}
    if stale:
        fmt, folder = next(iter(stale.items()))
        raise ValueError(f"{spec.root} holds models of weights format {fmt} (e.g. {folder}), saved by an earlier "
                         f"version; this version computes format {WEIGHTS_FORMAT}: re-run with --fresh to retrain "
                         f"every trial (the earlier results under this name are removed), or give another --name")


def sole_sweep(spec: SweepSpec) -> contextlib.AbstractContextManager:
    """The lock of the sweep's folder while it runs: two sweeps of one name at once would write the
    same Tune state, checkpoints and results (and the --fresh of one would remove the other's), so
    the second is refused."""
    return sole_writer(spec.root,
                       f"another sweep is running {spec.root}: let it finish, or give this one another --name")


def settings(spec: SweepSpec) -> dict[str, Any]:
    """What the sweep's trials train, flat: every config key but where files go and how a run runs
    (``checkpoint.PLACEMENT_KEYS``), then the arms, configurations, replicates and scheduler."""
    from hlgt.train.checkpoint import PLACEMENT_KEYS

    flat = {k: v for k, v in spec.centre.to_flat().items() if k not in PLACEMENT_KEYS}
    flat.update({"sweep.arms": spec.arms, "sweep.samples": spec.samples, "sweep.replicates": spec.replicates,
                 "sweep.scheduler": spec.scheduler})
    return json.loads(json.dumps(flat))  # as the file reads back (tuples as lists)


def check_same_sweep(spec: SweepSpec, must_exist: bool = False) -> None:
    """Before a sweep resumes: ``ValueError`` naming each changed setting when an earlier sweep of
    this name trained other ones (Tune would restore its trials and mix them with these settings).
    ``must_exist``: a ``ValueError`` too when there is no earlier sweep of this name."""
    fs, root = filesystem(spec.root)
    try:
        with fs.open_input_stream(f"{root}/{SETTINGS_FILE}") as f:
            saved = json.loads(f.read())
    except FileNotFoundError:
        if must_exist:
            raise ValueError(f"{spec.root} holds no sweep: give the --name and --storage of one that has "
                             "started (and the flags it was started with)") from None
        return
    from hlgt.train.checkpoint import changed_settings

    changed = changed_settings({**unrecorded(spec), **saved}, settings(spec))
    if changed:
        raise ValueError(f"{spec.root} holds a sweep of other settings ({'; '.join(changed)}): --fresh starts it "
                         "over, --name NAME runs a new sweep beside it")


def unrecorded(spec: SweepSpec) -> dict[str, Any]:
    """What a ``sweep.json`` written by older code may lack: a config key added since takes its
    default (as a run's ``run_config.json`` does), the worker count (a placement setting then,
    never recorded) this sweep's."""
    defaults = json.loads(json.dumps(Config().to_flat()))
    return {**defaults, "train.workers": spec.centre.train.workers}


def save_settings(spec: SweepSpec) -> None:
    """Write ``settings`` into the sweep's root, for ``check_same_sweep`` when it is re-run; a new
    root (and the local folder of a root on S3) gets the marker of a sweep folder."""
    claim(spec.root, "sweep", earlier=(SETTINGS_FILE,))
    if is_uri(spec.root):
        claim(str(spec.local_dir), "sweep", earlier=("results.*", SO_FAR))
    # Whole: a --so-far may read it meanwhile.
    write_text(f"{spec.root.rstrip('/')}/{SETTINGS_FILE}", json.dumps(settings(spec), indent=1))


def check_removable(spec: SweepSpec) -> None:
    """Before anything else of ``--fresh``: ``ValueError`` unless the sweep's folders are sweep
    folders the project made (or missing)."""
    check_owned(spec.root, "sweep", "--fresh")
    if is_uri(spec.root):
        check_owned(str(spec.local_dir), "sweep", "--fresh")


def remove_earlier(spec: SweepSpec) -> None:
    """``--fresh``: remove what an earlier sweep of this name left (Tune state, checkpoints, W&B
    runs, results), so that every trial trains anew; only from folders the project made."""
    check_removable(spec)
    # A --so-far of this sweep holds its folder's lock (beside it, made before the folder itself)
    # while it tests and writes records, which a fresh sweep would then take as tested.
    busy = f"a --so-far is writing {spec.so_far_dir}: let it finish, then run --fresh again"
    held = folder_kind(str(spec.local_dir)) == "sweep"  # a --so-far needs the sweep to have started
    with sole_writer(str(spec.so_far_dir), busy) if held else contextlib.nullcontext():
        if remove_owned(spec.root, "sweep", "--fresh"):
            print(f"[sweep] --fresh: removed {spec.root}", flush=True)
        if is_uri(spec.root):
            remove_owned(str(spec.local_dir), "sweep", "--fresh")


def build_shards(spec: SweepSpec, address: str | None = None, prebuilt: str | None = None,
                 held: contextlib.ExitStack | None = None) -> dict[int, str]:
    """The shard folder of every fold the replicates use: ``prebuilt`` (``--shards``: one folder,
    or a pattern with ``{fold}`` for several folds; checked, never built), else built now unless
    it exists; each held for reading in ``held`` (the trials read them until they end) when given."""
    folds = sorted({int(r["data.fold"]) for r in spec.replicates})
    if prebuilt is None:
        return {fold: _absolute(ensure_shards(spec.centre.override({"data.fold": fold}), address=address, held=held))
                for fold in folds}
    if len(folds) > 1 and "{fold}" not in prebuilt:
        raise ValueError(f"--shards {prebuilt} is one folder for folds {folds}: give a pattern with {{fold}}")
    return {fold: _absolute(use_shards(spec.centre.override({"data.fold": fold}), prebuilt.format(fold=fold), held))
            for fold in folds}


def _absolute(folder: str | Path) -> str:
    """A shard folder as the trials, on any node, name it: a URI as it is, a path made absolute."""
    return str(folder) if is_uri(folder) else str(Path(folder).resolve())

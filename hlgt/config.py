"""Configuration: dataclasses inside, one flat dict of dotted keys at every boundary.

The CLI, Ray Tune, W&B and checkpoints all speak the flat form (``{"model.heads": 4}``);
the code speaks ``Config``. ``Config.from_flat`` rejects unknown keys and coerces types, so a
typo in a sweep file fails at once instead of silently training the default.

This module also names the ablation arms (each a flat override of the same code), the choices a
key takes (graphs, annotators, encoders, the comparison head's start), every key a model folder
holds (``MODEL_KEYS``) and the datasets' paper settings (where runs are stored: ``hlgt.storage``).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any

from hlgt.storage import is_uri, storage_path


def default_data_dir() -> str:
    """Where real benchmark files live: ``$HLGT_DATA_DIR``, else ``../shared/datasets``."""
    return os.environ.get("HLGT_DATA_DIR", os.path.join("..", "shared", "datasets"))


# Folders and files on this machine, made absolute where a command builds its config (from its
# working directory), so that a saved run config means the same place from any other directory.
LOCAL_PATH_KEYS = ("data.data_dir", "data.shards_dir", "train.out_dir", "train.word_vectors")

# MAWPS is cross-validated over 5 folds, cut by one of three schemes (their files: hlgt.data.splits).
MAWPS_N_FOLDS = 5
MAWPS_FOLD_SCHEMES = ("grouped", "graph2tree", "graph2tree-1921")
# The graph variants an arm may read (hlgt.data.graph.GRAPH_VARIANTS says which edges each keeps):
# Table 2's three graphs and the numerical comparison graph alone.
GRAPHS = ("srl", "parse", "quantity_cell", "nc")
# Who writes the graphs' semantic roles (hlgt.data.srl), and the model's choices (hlgt.model).
ANNOTATORS = ("offline", "ltp", "hanlp")
ENCODERS = ("hlgt", "hgt", "rgat", "none")
COMPARISON_INITS = ("zeros", "uniform")
# torch's generator takes 64 bits; below 2^63 a rank's and an epoch's offsets to the seed stay inside.
MAX_SEED = 2**63 - 1
# Bounds of the model's sizes, far beyond any trained here (the paper's: 128 / 512 / 2 / 5 / 45):
# a hand-edited 1e11 is refused when the config is made, not when torch tries to allocate it.
MAX_WIDTH = 16_384
MAX_LAYERS = 64
MAX_BEAM = 256
MAX_OUTPUT_LEN = 1_024


@dataclass
class DataConfig:
    dataset: str = "sample"  # sample | math23k | mawps | ape210k
    data_dir: str = field(default_factory=default_data_dir)
    fold: int = 0  # MAWPS cross-validation fold (0..4)
    # grouped (no text in two folds) | graph2tree (file-order folds) | graph2tree-1921 (Graph2Tree's code's)
    mawps_folds: str = "grouped"
    # False: the fold's validation problems train too (the literature's protocol; last epoch kept)
    mawps_valid: bool = True
    annotator: str = "offline"  # offline | ltp | hanlp
    annotator_model: str = ""  # hub id or local model directory for ltp / hanlp
    shards_dir: str = field(default_factory=lambda: storage_path("datasets", "processed"))
    graph: str = "srl"  # one of GRAPHS
    min_word_freq: int = 1  # 1 keeps every training word; GTS's and Graph2Tree's code keep words seen >= 5 times
    min_const_freq: int = 5  # GTS: an equation constant is kept when seen >= 5 times in training


@dataclass
class ModelConfig:
    encoder: str = "hlgt"  # hlgt | hgt (PyG's HGTConv) | rgat (RAT-SQL's relation-aware attention) | none (GTS)
    node_type: bool = True  # False: one node type for all nodes (Table 3, "w/o node type")
    line_graph: bool = True  # False: static edge-type embeddings, no line-graph layers
    aux_task: bool = True  # False: no numerical-comparison loss
    embedding_size: int = 128
    hidden_size: int = 512
    heads: int = 4
    layers: int = 2
    dropout: float = 0.5
    beta_com: float = 0.1
    comparison_init: str = "zeros"  # zeros (Dozat & Manning's biaffine starts at 0) | uniform (nn.Bilinear's draw)
    beam_size: int = 5
    max_output_len: int = 45
    # decoding only: the encoder's CPU GRUs multiply in bfloat16 (faster decoding: BENCHMARKS.md; CUDA keeps
    # cuDNN float32)
    bf16_inference: bool = False


# Every key of a model: a model folder must hold each (a missing one would load as today's default).
MODEL_KEYS = tuple(f"model.{f.name}" for f in dataclasses.fields(ModelConfig))


@dataclass
class TrainConfig:
    epochs: int = 80
    max_minutes: float = 0.0  # > 0: stop after the epoch that ends past this many minutes of this start
    batch_size: int = 64  # per worker: N Ray Train workers step on N x batch_size problems together
    lr: float = 1e-3
    weight_decay: float = 1e-5
    lr_step: int = 20  # halve the learning rate every lr_step epochs
    lr_gamma: float = 0.5
    grad_clip: float = 0.0  # > 0: clip the gradients' global L2 norm to this (the paper and GTS do not clip)
    seed: int = 1
    eval_every: int = 1
    workers: int = 1
    use_gpu: bool = False
    threads: int = 0  # torch intra-op threads per worker; 0 leaves torch's default
    compile: bool = False  # torch.compile the decoder's tree levels and the HLGT graph layers (Solver.compile_parts)
    # GPU, one process: replay the step after the BiGRUs as CUDA graphs (hlgt.train.cuda_graphs)
    cuda_graphs: bool = False
    # with cuda_graphs: the BiGRUs replayed too, as causal passes over the padded tokens (batches
    # bucketed by token length as well as tree depth)
    capture_bigrus: bool = False
    # word2vec/GloVe text file: the word embedding starts from its vectors (as the paper's 300-d ones)
    word_vectors: str = ""
    out_dir: str = field(default_factory=lambda: storage_path("runs"))
    wandb: bool = True
    wandb_project: str = "hlgt"


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_flat(self) -> dict[str, Any]:
        return {
            f"{section.name}.{f.name}": getattr(getattr(self, section.name), f.name)
            for section in dataclasses.fields(self)
            for f in dataclasses.fields(getattr(self, section.name))
        }

    @classmethod
    def from_flat(cls, flat: dict[str, Any] | None = None) -> "Config":
        return cls().override(flat or {})

    def override(self, flat: dict[str, Any]) -> "Config":
        """A copy with dotted keys replaced; unknown keys and bad values raise ``ValueError``."""
        known = self.to_flat()
        unknown = sorted(set(flat) - set(known), key=str)  # a YAML file can give a number as a key
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; known keys: {sorted(known)}")
        out = dataclasses.replace(
            self, **{s.name: dataclasses.replace(getattr(self, s.name)) for s in dataclasses.fields(self)}
        )
        for key, value in flat.items():
            section, name = key.split(".", 1)
            setattr(getattr(out, section), name, _coerce(key, value, type(known[key])))
        for key in LOCAL_PATH_KEYS:
            section, name = key.split(".", 1)
            path = getattr(getattr(out, section), name)
            if path and not is_uri(path):
                setattr(getattr(out, section), name, os.path.abspath(os.path.expanduser(path)))
        out.check()
        return out

    def check(self) -> None:
        """``ValueError`` naming the key when a value cannot work, before any data or model is built
        (a head count that does not divide the hidden size would otherwise fail after the shards)."""
        m, t, d = self.model, self.train, self.data
        mawps = d.dataset == "mawps"
        rules = [
            ("data.graph", d.graph in GRAPHS, f"must be one of {', '.join(GRAPHS)}"),
            ("data.fold", 0 <= d.fold < MAWPS_N_FOLDS if mawps else d.fold == 0,
             f"must lie in 0..{MAWPS_N_FOLDS - 1} for MAWPS" if mawps
             else f"must be 0: {d.dataset} has no folds (MAWPS alone is cross-validated)"),
            ("data.mawps_folds", not mawps or d.mawps_folds in MAWPS_FOLD_SCHEMES,
             f"must be one of {', '.join(MAWPS_FOLD_SCHEMES)}"),
            ("data.mawps_valid", mawps or d.mawps_valid,
             "can be false only for MAWPS (the other datasets' validation is a file)"),
            ("data.annotator", d.annotator in ANNOTATORS, f"must be one of {', '.join(ANNOTATORS)}"),
            ("data.min_const_freq", d.min_const_freq >= 1, "must be >= 1"),
            ("model.encoder", m.encoder in ENCODERS, f"must be one of {', '.join(ENCODERS)}"),
            ("model.comparison_init", m.comparison_init in COMPARISON_INITS,
             f"must be one of {', '.join(COMPARISON_INITS)}"),
            ("model.hidden_size", 1 <= m.hidden_size <= MAX_WIDTH, f"must lie in 1..{MAX_WIDTH}"),
            ("model.embedding_size", 1 <= m.embedding_size <= MAX_WIDTH, f"must lie in 1..{MAX_WIDTH}"),
            ("model.heads", m.heads >= 1 and m.hidden_size % m.heads == 0,
             f"must be >= 1 and divide model.hidden_size ({m.hidden_size})"),
            ("model.layers", 1 <= m.layers <= MAX_LAYERS, f"must lie in 1..{MAX_LAYERS}"),
            ("model.dropout", 0.0 <= m.dropout < 1.0, "must lie in [0, 1)"),
            ("model.beta_com", math.isfinite(m.beta_com) and m.beta_com >= 0.0, "must be a finite number >= 0"),
            ("model.beam_size", 1 <= m.beam_size <= MAX_BEAM, f"must lie in 1..{MAX_BEAM}"),
            ("model.max_output_len", 1 <= m.max_output_len <= MAX_OUTPUT_LEN, f"must lie in 1..{MAX_OUTPUT_LEN}"),
            ("train.epochs", t.epochs >= 1, "must be >= 1"),
            ("train.max_minutes", math.isfinite(t.max_minutes) and t.max_minutes >= 0.0,
             "must be a finite number >= 0 (0: no time budget)"),
            ("train.batch_size", t.batch_size >= 1, "must be >= 1"),
            ("train.lr", math.isfinite(t.lr) and t.lr > 0.0, "must be a finite number > 0"),
            ("train.weight_decay", math.isfinite(t.weight_decay) and t.weight_decay >= 0.0,
             "must be a finite number >= 0"),
            ("train.lr_step", t.lr_step >= 1, "must be >= 1"),
            ("train.lr_gamma", math.isfinite(t.lr_gamma) and t.lr_gamma > 0.0, "must be a finite number > 0"),
            ("train.eval_every", t.eval_every >= 1, "must be >= 1"),
            ("train.workers", t.workers >= 1, "must be >= 1"),
            ("train.seed", 0 <= t.seed <= MAX_SEED, f"must lie in 0..{MAX_SEED}"),
            ("train.grad_clip", math.isfinite(t.grad_clip) and t.grad_clip >= 0.0,
             "must be a finite number >= 0 (0: no clipping)"),
            # The HGT and RGAT baselines' layers are not checked on padded graphs; replaying a step
            # bypasses data parallelism's wrapper.
            ("train.cuda_graphs", not t.cuda_graphs or (m.encoder in ("hlgt", "none") and t.workers == 1),
             "runs the hlgt and none encoders only, in one process (train.workers=1)"),
            ("train.capture_bigrus", not t.capture_bigrus or t.cuda_graphs, "needs train.cuda_graphs=true"),
        ]
        bad = [f"{key}={getattr(getattr(self, key.split('.')[0]), key.split('.')[1])!r} {why}"
               for key, ok, why in rules if not ok]
        if bad:
            raise ValueError("bad config: " + "; ".join(bad))

    def unread_keys(self) -> set[str]:
        """Keys this configuration's model never reads: the graph encoder's settings when there is
        no graph encoder, the line graph switch for the HGT and RGAT baselines (they have none) and the
        node type switch for RGAT, β_com and the head's initialisation without the comparison head.
        A sweep does not vary them."""
        unread = set()
        if self.model.encoder == "none":
            unread |= {"model.heads", "model.layers", "model.node_type", "model.line_graph", "data.graph"}
        if self.model.encoder in ("hgt", "rgat"):
            unread.add("model.line_graph")
        if self.model.encoder == "rgat":
            unread.add("model.node_type")
        if not self.model.aux_task:
            unread |= {"model.beta_com", "model.comparison_init"}
        return unread


def _coerce(key: str, value: Any, kind: type) -> Any:
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    if kind is bool:
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
    elif kind is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        if hasattr(value, "__index__") and not isinstance(value, bool):  # numpy ints from Tune
            return int(value)
    elif kind is float:
        # numbers.Real: numpy's floats and ints from Tune, not bool (an int) nor numpy's bool_
        if not isinstance(value, bool) and isinstance(value, (numbers.Real, str)):
            try:
                return float(value)
            except (TypeError, ValueError):
                pass
    elif kind is str:
        return str(value)
    raise ValueError(f"config key {key!r} expects {kind.__name__}, got {value!r}")


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """``["model.heads=8", "train.lr=5e-4"]`` from a command line → a flat dict (types coerced later)."""
    flat = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"override {pair!r} is not of the form key=value")
        key, value = pair.split("=", 1)
        flat[key.strip()] = value.strip()
    return flat


# The ablation arms of the paper's Tables 2 and 3, each a flat override of the full model.
ABLATIONS: dict[str, dict[str, Any]] = {
    "full": {},
    "no_node_type": {"model.node_type": False},
    "no_line_graph": {"model.line_graph": False},
    "no_aux_task": {"model.aux_task": False},
    "hgt": {"model.encoder": "hgt"},
    "rgat": {"model.encoder": "rgat"},
    "gts": {"model.encoder": "none", "model.aux_task": False},  # the GTS baseline: no graph, no comparison loss
    "parse_graph": {"data.graph": "parse"},
    "quantity_cell": {"data.graph": "quantity_cell"},
    # Not in the paper: the numerical comparison graph alone, HLGT without its SRL edges.
    "nc_graph": {"data.graph": "nc"},
}


def check_ablation(name: str) -> str:
    """``name`` when it is an ablation arm, else ``ValueError`` naming the arms: every command
    checks its ``--ablation`` here."""
    if name not in ABLATIONS:
        raise ValueError(f"unknown ablation arm {name!r}; the arms are {', '.join(ABLATIONS)}")
    return name


def ablation_arms(names: str | list[str]) -> list[str]:
    """``"all"``, ``"a,b"`` or a list → checked arm names, in the order given."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not names:
        raise ValueError(f"no arm named: give one or more of {', '.join(ABLATIONS)} (or all)")
    if names == ["all"]:
        return list(ABLATIONS)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"arm(s) named twice: {', '.join(twice)}")
    return [check_ablation(n) for n in names]


# Dataset defaults from the paper's section 4.1 (epochs; LR halved every 20 epochs on Math23K,
# every 10 on MAWPS and APE210K).
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "math23k": {"train.epochs": 80, "train.lr_step": 20},
    "ape210k": {"train.epochs": 50, "train.lr_step": 10},
    "mawps": {"train.epochs": 30, "train.lr_step": 10},
    "sample": {"train.epochs": 30, "train.lr_step": 10},
}

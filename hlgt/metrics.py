"""Metric names, defined once: every reporter (console, Ray, Tune, W&B, results table) uses
these spellings, and prints a share as ``percent`` does."""
import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Mapping

TRAIN_LOSS = "train/loss"
TRAIN_TREE_LOSS = "train/tree_loss"
TRAIN_COM_LOSS = "train/com_loss"
TRAIN_PROBLEMS = "train/problems"  # problems trained on in the epoch, every worker's (an equal split drops some)
TRAIN_PROBLEMS_PER_S = "train/problems_per_s"
TRAIN_GRAD_NORM_MAX = "train/grad_norm_max"  # the epoch's largest global gradient norm, before clipping
# The model's parts (``Solver.parts``) and the encoder's activations (``Solver.forward``'s scales):
# every epoch reports each part's largest gradient norm and each activation's mean scale.
MODEL_PARTS = ("embedding", "word_gru", "seq_gru", "graph", "fusion", "decoder", "comparison")
ACTIVATIONS = ("h_b", "h_seq", "h_str", "memory")


def grad_norm_metric(part: str) -> str:
    """The epoch's largest gradient norm of one model part, before clipping."""
    return f"grad_norm_max/{part}"


def scale_metric(activation: str) -> str:
    """An activation's standard deviation over the real tokens of a batch, averaged over the epoch's
    batches (every worker's, under data parallelism)."""
    return f"scale/{activation}"


VAL_VALUE_ACC = "val/value_acc"
VAL_EQUATION_ACC = "val/equation_acc"
VAL_TREE_LOSS = "val/tree_loss"  # teacher-forced, in eval mode: what training minimises, on validation
TEST_VALUE_ACC = "test/value_acc"
TEST_EQUATION_ACC = "test/equation_acc"
EPOCH = "epoch"
BEST_EPOCH = "best_epoch"  # final metric: the epoch whose weights are the best model
LR = "train/lr"


def validated(metrics: Mapping[str, Any]) -> bool:
    """Whether an epoch's metrics come from a validation that ran: every report carries the last
    validation forward (or 0 before any), and only an epoch that validated has a validation loss."""
    return VAL_TREE_LOSS in metrics


def percent(fraction: float, digits: int = 1, sign: bool = False) -> str:
    """``fraction`` as a percentage to ``digits`` decimals, without "%": rounded once, halves away
    from zero, from the shortest decimal that reads back as the float, so that every command prints
    the same digits for one share, whether it holds counts or a stored fraction (23 / 80 is 28.75%:
    28.8, where ``100 * 23 / 80`` and ``100 * (23 / 80)`` print 28.8 and 28.7)."""
    if not math.isfinite(fraction):
        return str(float(fraction))
    exact = Decimal(repr(float(fraction))) * 100
    shown = exact.quantize(Decimal(10) ** -digits, rounding=ROUND_HALF_UP)
    return f"{shown:+}" if sign else f"{shown}"

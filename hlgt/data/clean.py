"""Cleaning: which problems a split keeps, and why each other one is dropped (every drop counted).

Every split, at the door: a problem over the limits of what the model reads is dropped, counted:

  ``empty_text``            no token after number extraction
  ``too_long``              more than ``max_tokens`` tokens (``MAX_TOKENS``, 512)
  ``too_many_quantities``   more than ``max_quantities`` quantities (``MAX_QUANTITIES``, 30): every
                            pair of quantities is linked (BAE/LES/DT), and the line graph pairs
                            those edges again, so a graph grows with the cube of the quantities

  The longest Math23K problem has 115 tokens and 15 quantities. With both limits (and the line
  graph's own, ``graph.MAX_LINE_EDGES``) no problem can take more than a bounded amount of
  memory and time, in training, evaluation or ``solve``.

Training split (``train=True``): a problem is also dropped, counted under the first reason that
applies:

  ``unreadable_answer``     the answer is not a number, fraction, percentage or expression
  ``unparseable_equation``  the equation does not parse, cannot be evaluated (division by zero),
                            or is not solved for x (MAWPS ``X-9=4``)
  ``value_mismatch``        the equation evaluates to another value than the answer (see
                            ``numbers.answer_matches`` for the tolerance)
  ``rare_constant``         it needs a constant outside the learned constant set

  The constant set is learned here, on the training split: a number of the equations that is no
  quantity of its text is a constant, kept when it occurs in at least ``min_const_freq`` training
  equations (GTS's rule; default 5, ``DataConfig.min_const_freq``). Constants are ordered by
  frequency, then by value, so the decoder vocabulary is deterministic.

Valid/test split (``train=False``): besides the limits, only ``unreadable_answer`` drops a problem:
every other problem is kept and scored. One whose gold equation cannot be represented keeps
``prefix=None`` and ``Example.flag`` names why; ``CleanResult.unrepresentable`` counts them. The scorer compares
VALUES with the answer, so such a problem simply counts as wrong when the model misses it.
"""
from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterable

from hlgt.data.numbers import ExampleError, Example, is_constant, to_example
from hlgt.data.problems import Problem
from hlgt.expr import parse_number

MAX_TOKENS = 512
MAX_QUANTITIES = 30
TOO_LONG = "too_long"
TOO_MANY_QUANTITIES = "too_many_quantities"
RARE_CONSTANT = "rare_constant"
# Every reason a split can count, in the order the report prints them.
DROP_REASONS = (
    "empty_text",
    TOO_LONG,
    TOO_MANY_QUANTITIES,
    "unreadable_answer",
    "unparseable_equation",
    "value_mismatch",
    "no_equation",
    RARE_CONSTANT,
)


@dataclass
class CleanResult:
    examples: list[Example]
    dropped: collections.Counter = field(default_factory=collections.Counter)  # reason -> problems dropped
    constants: list[str] = field(default_factory=list)  # the constant set in use (learned on train)
    unrepresentable: collections.Counter = field(default_factory=collections.Counter)  # kept, prefix None, by flag
    read: int = 0  # problems given to clean_split


def over_limits(tokens, quantities, max_tokens: int = MAX_TOKENS,
                max_quantities: int = MAX_QUANTITIES) -> tuple[str, str] | None:
    """The limit a problem's tokens and quantities exceed, as (reason, message for the user), or None."""
    if len(tokens) > max_tokens:
        return TOO_LONG, f"the problem has {len(tokens)} tokens; the model reads at most {max_tokens}"
    if len(quantities) > max_quantities:
        return TOO_MANY_QUANTITIES, (f"the problem has {len(quantities)} quantities; the model reads "
                                     f"at most {max_quantities}")
    return None


def constant_counts(examples: Iterable[Example]) -> collections.Counter:
    """How many equations use each constant (a constant counts once per equation)."""
    counts: collections.Counter = collections.Counter()
    for ex in examples:
        if ex.prefix is not None:
            counts.update({tok for tok in ex.prefix if is_constant(tok)})
    return counts


def learn_constants(examples: Iterable[Example], min_const_freq: int) -> list[str]:
    """Constants used by at least ``min_const_freq`` equations, most frequent first, ties by value."""
    counts = constant_counts(examples)
    kept = [c for c, n in counts.items() if n >= min_const_freq]
    return sorted(kept, key=lambda c: (-counts[c], Fraction(parse_number(c)), c))


def clean_split(
    problems: Iterable[Problem],
    train: bool,
    constants: list[str] | None = None,
    min_const_freq: int = 5,
    max_tokens: int = MAX_TOKENS,
    max_quantities: int = MAX_QUANTITIES,
    on_drop: Callable[[Problem, str, str], None] | None = None,
) -> CleanResult:
    """Examples of one split, with every drop counted by reason (see the module docstring).

    ``train=True`` learns the constant set unless ``constants`` is given; ``train=False`` needs the
    training split's ``constants``. ``on_drop(problem, reason, message)`` hears of each problem
    dropped before the constants are applied (every drop of a split that is not train).
    """
    if not train and constants is None:
        raise ValueError("clean_split(train=False) needs the constants learned on the training split")
    if min_const_freq < 1:
        raise ValueError(f"min_const_freq must be >= 1, got {min_const_freq}")
    result = CleanResult(examples=[])
    candidates: list[Example] = []
    for problem in problems:
        result.read += 1
        try:
            ex = to_example(problem)
            over = over_limits(ex.tokens, ex.quantities, max_tokens, max_quantities)
        except ExampleError as e:
            over = e.reason, str(e).removeprefix(f"{e.reason}: ")
        if over is None and train and ex.flag is not None:
            over = ex.flag, f"its equation is flagged {ex.flag}"
        if over is None:
            candidates.append(ex)
            continue
        result.dropped[over[0]] += 1
        if on_drop is not None:
            on_drop(problem, *over)
    if constants is None:
        constants = learn_constants(candidates, min_const_freq)
    known = set(constants)
    result.constants = list(constants)
    for ex in candidates:
        if ex.prefix is not None and any(is_constant(t) and t not in known for t in ex.prefix):
            if train:
                result.dropped[RARE_CONSTANT] += 1
                continue
            ex = dataclasses.replace(ex, prefix=None, flag=RARE_CONSTANT)
        if ex.flag is not None:
            result.unrepresentable[ex.flag] += 1
        result.examples.append(ex)
    return result

"""Cleaning: which problems a split keeps, and why each other one is dropped (every drop counted).

Training split (``train=True``): a problem is dropped, counted under the first reason that applies:

  ``empty_text``            no token after number extraction
  ``too_long``              more than ``max_tokens`` tokens (default 512; a 10,000-character
                            text is a counted skip, never a crash or a memory blow-up later)
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

Valid/test split (``train=False``): only ``unreadable_answer`` (and ``empty_text``) drops a problem:
every other problem is kept and scored. One whose gold equation cannot be represented keeps
``prefix=None`` and ``Example.flag`` names why (``too_long`` is not a reason here: the model reads
long problems at test time); ``CleanResult.unrepresentable`` counts them. The scorer compares
VALUES with the answer, so such a problem simply counts as wrong when the model misses it.
"""
from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterable

from hlgt.data.numbers import ExampleError, Example, is_constant, to_example
from hlgt.data.problems import Problem
from hlgt.expr import parse_number

MAX_TOKENS = 512
TOO_LONG = "too_long"
RARE_CONSTANT = "rare_constant"
# Every reason a split can count, in the order the report prints them.
DROP_REASONS = (
    "empty_text",
    TOO_LONG,
    "unreadable_answer",
    "unparseable_equation",
    "value_mismatch",
    RARE_CONSTANT,
)


@dataclass
class CleanResult:
    examples: list[Example]
    dropped: collections.Counter = field(default_factory=collections.Counter)  # reason -> problems dropped
    constants: list[str] = field(default_factory=list)  # the constant set in use (learned on train)
    unrepresentable: collections.Counter = field(default_factory=collections.Counter)  # kept, prefix None, by flag
    read: int = 0  # problems given to clean_split


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
) -> CleanResult:
    """Examples of one split, with every drop counted by reason (see the module docstring).

    ``train=True`` learns the constant set unless ``constants`` is given; ``train=False`` needs the
    training split's ``constants``.
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
        except ExampleError as e:
            result.dropped[e.reason] += 1
            continue
        if train and len(ex.tokens) > max_tokens:
            result.dropped[TOO_LONG] += 1
        elif train and ex.flag is not None:
            result.dropped[ex.flag] += 1
        else:
            candidates.append(ex)
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

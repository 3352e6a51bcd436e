"""A ``Problem``'s tokens and equation → an ``Example`` with slots ``N0..Nk``.

Quantities in the text (``extract_quantities``)
  Only digits make quantities (as in GTS): 第二, 一半, 两 are words. Each number becomes ONE token,
  whatever the file did with it:

  * APE210K spreads fractions over tokens (``( 1 / 5 )``, mixed ``12 ( 7 / 8 )``): merged back into
    ``(1/5)``, ``12(7/8)``. A ``%`` token apart from its number (MAWPS: ``5 % commission``) is NOT
    merged: MAWPS's equations then write ``5*0.01``, so the quantity is 5 and ``%`` is its unit word.
  * a number glued to a unit (``5千克``, ``145cm``, ``(1/10)m``, ``15千米/小时``, ``60kph``) is split
    so the unit token sits right after the number (the graph links a unit/rate word to the number
    before it); a hyphen joining number and word (``30-mile``) is dropped.
  * ratios ``3:7`` / ``3 ： 4 ： 5`` give one quantity per part (kind ``ratio``), each its own token,
    the colon tokens kept between them.

  Kinds: ``integer`` (``3``, ``1,200``, ``-7``), ``decimal`` (``2.5``), ``fraction`` (``(2/5)``,
  ``2/5``, mixed ``1(5/6)``), ``percentage`` (``20%`` → 0.2), ``ratio`` (a part of ``3:7``).
  Not quantities: digits inside a word (``MP3``, ``H2``, ``第3`` as one token), English ordinals
  (``1st``, ``8th``), and a digit run too long for a float to hold exactly (> 15 digits), which
  stays a word so that a pathological text cannot produce an infinite value.

Equation → prefix (``to_example``)
  ``hlgt.expr`` tokenises and parses the raw equation. It writes a fraction ``(a/b)`` as the
  sub-expression ``a / b`` and a mixed number ``w(a/b)`` as ``w + a / b``; when the text holds that
  fraction or mixed number (same numerator, denominator and whole part as written), the whole
  sub-expression becomes its slot, as GTS's string matching does (likewise ``(20)%``, read as
  ``20 / 100``, becomes the slot of the text's ``20%``). Every other number of the
  equation maps to the FIRST quantity with the same surface text, else the first with the same
  exact value (value matching reads MAWPS's ``3.0`` against the text's ``3``, and an equation's
  ``0.2`` against the text's ``20%``). A number matching no quantity is a constant, written in
  canonical form (``"1"``, ``"3.14"``, ``"100"``, ``"0.5"``, ``"(1/3)"``), so that ``1.0`` and ``1``
  or ``50%`` and ``0.5`` are one constant.

  The prefix is then evaluated exactly with the quantities' values and must equal the answer
  (``answer_matches``: ``values_match``, or rounding to the answer's written decimals). An
  equation that does not parse, is not solved for x, or evaluates to another value gives
  ``prefix=None`` and ``flag`` naming why; an unreadable answer or an empty text raises
  ``ExampleError`` with its reason (the cleaning stage counts both, see clean.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from hlgt.data.problems import Problem
from hlgt.expr import (
    OPS,
    ExprError,
    eval_prefix,
    infix_to_prefix,
    parse_answer,
    parse_number,
    tokenize_infix,
    values_match,
)

NUM_KINDS = ("integer", "decimal", "fraction", "percentage", "ratio")

# Reasons, shared with clean.py and the report.
EMPTY_TEXT = "empty_text"
UNREADABLE_ANSWER = "unreadable_answer"
UNPARSEABLE_EQUATION = "unparseable_equation"
VALUE_MISMATCH = "value_mismatch"
NO_EQUATION = "no_equation"  # a generic file's problem given with its answer only

_MAX_DIGITS = 15  # a longer whole part is not a quantity (keeps values finite and exact as floats)

# One number at the start of a token, most specific form first.
_PLAIN = r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?"
_NUMBER_AT_START = re.compile(
    r"-?(?:"
    r"[0-9]+\([0-9]+/[0-9]+\)"  # mixed number 1(5/6)
    r"|\([0-9]+(?:\.[0-9]+)?/[0-9]+(?:\.[0-9]+)?\)"  # (2/5)
    r"|[0-9]+/[0-9]+(?![0-9./])"  # bare 2/5
    rf"|(?:{_PLAIN})[%％]?"  # 3, 1,200, 2.5, 20%
    r")"
)
_ORDINAL = re.compile(r"[0-9]+(?:st|nd|rd|th)", re.I)
_RATIO_TOKEN = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[:：][0-9]+(?:\.[0-9]+)?)+")
_RATIO_PART = re.compile(r"[0-9]+(?:\.[0-9]+)?|[:：]")
_INT = re.compile(r"[0-9]+")
_FRACTION_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_SPLIT_PUNCT = set(",，、;；:：.。!！?？)）]」”'\"")
_COLONS = (":", "：")
_SLOT = re.compile(r"N[0-9]+")
_ROUNDED_ANSWER = re.compile(r"-?[0-9]+\.([0-9]+)")
# Surface forms of fraction quantities, to match equation sub-expressions "a / b", "w + a / b".
_FRACTION_SURFACE = re.compile(r"(?:([0-9]+)(?=\())?\(?([0-9]+)/([0-9]+)\)?")


class ExampleError(ValueError):
    """A problem that cannot become an Example at all; ``reason`` is the counted drop reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True)
class Quantity:
    text: str  # surface form, e.g. "(2/5)", "3" (a part of "3:7"), "20%", "1,200"
    value: float  # numeric value; 20% -> 0.2, (2/5) -> 0.4
    kind: str  # one of NUM_KINDS
    position: int  # index into Example.tokens


@dataclass
class Example:
    id: str
    lang: str
    source: str
    tokens: list[str]  # text tokens, every number merged into ONE token
    quantities: list[Quantity]  # in order of appearance = slots N0..Nk
    prefix: list[str] | None  # gold equation in prefix over OPS, constants, "N0".."Nk"; None: see flag
    answer: float  # gold answer value
    flag: str | None = None  # why prefix is None ("unparseable_equation", "value_mismatch", "rare_constant")


# ---------------------------------------------------------------------------------------------
# Text: merge and split tokens, find quantities.


def _merge_spread_numbers(tokens: Sequence[str]) -> list[str]:
    """``( 1 / 5 )`` → ``(1/5)``, ``12 ( 7 / 8 )`` → ``12(7/8)`` (APE210K's one-character tokens)."""
    out: list[str] = []
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if (
            t == "("
            and i + 4 < n
            and _FRACTION_NUMBER.fullmatch(tokens[i + 1])
            and tokens[i + 2] == "/"
            and _FRACTION_NUMBER.fullmatch(tokens[i + 3])
            and tokens[i + 4] == ")"
        ):
            frac = f"({tokens[i + 1]}/{tokens[i + 3]})"
            if out and _INT.fullmatch(out[-1]) and _INT.fullmatch(tokens[i + 1]) and _INT.fullmatch(tokens[i + 3]):
                out[-1] += frac  # a whole number right before a fraction: a mixed number
            else:
                out.append(frac)
            i += 5
        else:
            out.append(t)
            i += 1
    return out


def _split_token(token: str) -> list[str]:
    """Split numbers at the start of a token from what follows (``5千克`` → ``5`` ``千克``)."""
    if _ORDINAL.fullmatch(token):
        return [token]
    pieces: list[str] = []
    rest = token
    while rest:
        m = _NUMBER_AT_START.match(rest)
        if m and not (m.group().startswith("-") and pieces):  # a sign only at the token's start
            pieces.append(m.group())
            rest = rest[m.end():]
        elif rest[0] == "-" and m and pieces and _NUMBER_AT_START.fullmatch(pieces[-1]):
            # between two numbers a minus is an operator ("3-5")
            pieces.append("-")
            rest = rest[1:]
        elif rest[0] in _SPLIT_PUNCT and pieces:
            pieces.append(rest[0])
            rest = rest[1:]
        elif rest[0] == "-" and pieces and len(rest) > 1 and rest[1].isalpha():
            rest = rest[1:]  # "30-mile" → "30" "mile"
        else:
            pieces.append(rest)
            break
    return pieces


def _kind(text: str) -> str:
    if text[-1] in "%％":
        return "percentage"
    if "/" in text:
        return "fraction"
    if "." in text:
        return "decimal"
    return "integer"


def _value(text: str) -> Fraction | None:
    """Exact value of a quantity's surface text, or None when it is not a usable quantity."""
    whole_parts = re.findall(r"(?<![0-9.])[0-9,]+", text)  # digits before any decimal point
    if any(len(w.replace(",", "")) > _MAX_DIGITS for w in whole_parts):
        return None
    try:
        value = parse_number(text.replace("％", "%"))
    except ExprError:
        return None
    return Fraction(value)


def _quantities(tokens: Sequence[str]) -> tuple[list[str], list[Quantity], list[Fraction]]:
    merged = _merge_spread_numbers(tokens)
    out: list[str] = []
    candidates: list[tuple[int, Fraction, str]] = []  # (position, exact value, kind)
    for token in merged:
        if _RATIO_TOKEN.fullmatch(token):
            pieces = _RATIO_PART.findall(token)
        else:
            pieces = _split_token(token)
        for piece in pieces:
            if not _ORDINAL.fullmatch(piece) and _NUMBER_AT_START.fullmatch(piece):
                value = _value(piece)
                if value is not None:
                    candidates.append((len(out), value, _kind(piece)))
            out.append(piece)
    # Ratios: plain numbers joined by colons, spread (3 ： 4 ： 5) or split from one token above.
    ratio_positions: set[int] = set()
    numeric_at = {pos for pos, _, kind in candidates if kind in ("integer", "decimal")}
    for i in range(1, len(out) - 1):
        if out[i] in _COLONS and i - 1 in numeric_at and i + 1 in numeric_at:
            ratio_positions.update((i - 1, i + 1))
    quantities, exact = [], []
    for pos, value, kind in candidates:
        quantities.append(
            Quantity(text=out[pos], value=float(value), kind="ratio" if pos in ratio_positions else kind, position=pos)
        )
        exact.append(value)
    return out, quantities, exact


def extract_quantities(tokens: Sequence[str]) -> tuple[list[str], list[Quantity]]:
    """Tokens with every number as one token, and the quantities in order (slots N0..Nk)."""
    out, quantities, _ = _quantities(tokens)
    return out, quantities


# ---------------------------------------------------------------------------------------------
# Equation: infix → prefix over OPS, constants and slots; check against the answer.


def canonical_constant(value: Fraction) -> str:
    """One spelling per constant value: ``"1"``, ``"0.5"``, ``"3.14"``, ``"-2"``, ``"(1/3)"``."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d == 1:  # a terminating decimal: exact digits, no float rounding
        digits = 0
        while (value * 10**digits).denominator != 1:
            digits += 1
        sign = "-" if value < 0 else ""
        scaled = abs(value.numerator * 10**digits // value.denominator)
        whole, frac = divmod(scaled, 10**digits)
        return f"{sign}{whole}.{frac:0{digits}d}"
    sign = "-" if value < 0 else ""
    return f"{sign}({abs(value.numerator)}/{value.denominator})"


def is_constant(token: str) -> bool:
    """True for a prefix token that is neither an operator nor a slot."""
    return token not in OPS and not _SLOT.fullmatch(token)


def _fraction_keys(quantities: Sequence[Quantity]) -> dict[tuple[str, str, str], int]:
    """(whole, numerator, denominator) as written → first slot, for fraction quantities."""
    keys: dict[tuple[str, str, str], int] = {}
    for i, q in enumerate(quantities):
        if q.kind == "fraction":
            m = _FRACTION_SURFACE.fullmatch(q.text.lstrip("-"))
            if m and not q.text.startswith("-"):
                keys.setdefault((m.group(1) or "", m.group(2), m.group(3)), i)
    return keys


def _spelled_slot(prefix: Sequence[str], i: int, fraction_slot: dict, percents: dict) -> tuple[str, int] | None:
    """The slot of a quantity the equation spells out as a sub-expression at ``prefix[i]``, and the
    sub-expression's length: the text's ``(a/b)`` as ``/ a b``, ``w(a/b)`` as ``+ w / a b``, and
    ``20%`` as ``/ 20 100`` (``hlgt.expr`` reads APE210K's ``(20)%`` so)."""
    op, rest = prefix[i], prefix[i + 1:i + 5]
    if op == "+" and len(rest) == 4 and rest[1] == "/" and all(_INT.fullmatch(rest[k]) for k in (0, 2, 3)):
        slot = fraction_slot.get((rest[0], rest[2], rest[3]))
        if slot is not None:
            return f"N{slot}", 5
    if len(rest) < 2 or not (is_constant(rest[0]) and is_constant(rest[1])):
        return None
    a, b = rest[0], rest[1]
    slot = None
    if op == "/" and _INT.fullmatch(a) and _INT.fullmatch(b):
        slot = fraction_slot.get(("", a, b))
    if slot is None and op == "/" and percents and Fraction(parse_number(b)) == 100:
        slot = percents.get(Fraction(parse_number(a)) / 100)
    return (f"N{slot}", 3) if slot is not None else None


def _map_numbers(prefix: list[str], quantities: Sequence[Quantity], exact: Sequence[Fraction]) -> list[str]:
    fraction_slot = _fraction_keys(quantities)
    percents: dict[Fraction, int] = {}
    for k, q in enumerate(quantities):
        if q.kind == "percentage":
            percents.setdefault(exact[k], k)
    out: list[str] = []
    i = 0
    while i < len(prefix):
        tok = prefix[i]
        spelled = _spelled_slot(prefix, i, fraction_slot, percents) if tok in OPS else None
        if spelled is not None:
            out.append(spelled[0])
            i += spelled[1]
        else:
            out.append(tok if tok in OPS else _map_number(tok, quantities, exact))
            i += 1
    return out


def _map_number(tok: str, quantities: Sequence[Quantity], exact: Sequence[Fraction]) -> str:
    for i, q in enumerate(quantities):
        if q.text == tok:
            return f"N{i}"
    value = Fraction(parse_number(tok))
    for i, v in enumerate(exact):
        if v == value:
            return f"N{i}"
    return canonical_constant(value)


def equation_to_prefix(
    equation: str, quantities: Sequence[Quantity], exact: Sequence[Fraction] | None = None
) -> list[str]:
    """Raw equation → prefix over OPS, constants and slots; raises ``ExprError`` when unparseable."""
    if exact is None:
        exact = [Fraction(parse_number(q.text.replace("％", "%"))) for q in quantities]
    return _map_numbers(infix_to_prefix(tokenize_infix(equation)), quantities, exact)


def answer_matches(value: float, answer: float, answer_text: str = "") -> bool:
    """The cleaning tolerance: ``values_match`` (1e-4 relative or absolute), or, for an answer
    written with d >= 1 decimals, a value that rounds to it (``|value - answer| <= 0.5 * 10**-d``):
    MAWPS rounds its answers (``x=2.99/12.0``, answer ``0.25``)."""
    if values_match(value, answer):
        return True
    m = _ROUNDED_ANSWER.fullmatch(answer_text.strip())
    return bool(m) and abs(value - answer) <= 0.5 * 10 ** -len(m.group(1)) + 1e-12


def to_example(problem: Problem) -> Example:
    """Problem → Example. Raises ``ExampleError`` (reason ``empty_text`` / ``unreadable_answer``);
    an equation that cannot be used gives ``prefix=None`` with ``flag`` set."""
    tokens, quantities, exact = _quantities(problem.tokens)
    if not tokens:
        raise ExampleError(EMPTY_TEXT, f"problem {problem.id} has no text")
    if not problem.equation:  # a generic file's problem with an answer only: scored by value
        answer = parse_answer(problem.answer)
        if answer is None:
            raise ExampleError(UNREADABLE_ANSWER, f"problem {problem.id}: cannot read answer {problem.answer[:80]!r}")
        return Example(id=problem.id, lang=problem.lang, source=problem.source, tokens=tokens,
                       quantities=quantities, prefix=None, answer=answer, flag=NO_EQUATION)
    answer = parse_answer(problem.answer) if problem.answer else None
    if answer is None and problem.answer:
        raise ExampleError(UNREADABLE_ANSWER, f"problem {problem.id}: cannot read answer {problem.answer[:80]!r}")
    prefix: list[str] | None
    flag = None
    try:
        prefix = equation_to_prefix(problem.equation, quantities, exact)
        value = eval_prefix(prefix, exact)
        if answer is None:  # a generic file's problem with an equation only: its value is the answer
            answer = float(value)
        elif answer_matches(value, answer, problem.answer):
            # Score against the gold equation's exact value, as GTS and Graph2Tree do: a rounded
            # answer (MAWPS's 0.25 for 2.99/12) would mark the gold equation itself wrong.
            answer = float(value)
        else:
            prefix, flag = None, VALUE_MISMATCH
    except ExprError:
        if answer is None:
            raise ExampleError(UNREADABLE_ANSWER, f"problem {problem.id}: no answer, and its equation "
                                                  f"{problem.equation[:80]!r} does not evaluate") from None
        prefix, flag = None, UNPARSEABLE_EQUATION
    return Example(
        id=problem.id,
        lang=problem.lang,
        source=problem.source,
        tokens=tokens,
        quantities=quantities,
        prefix=prefix,
        answer=answer,
        flag=flag,
    )


"""Equations: tokenising raw infix, infix <-> prefix, exact evaluation, answer parsing, and a
prefix with its slots read as the numbers written (``numbers_written``, ``infix_with_numbers``).

Every stage that touches an equation goes through this file: the data verifier keeps a problem
only when its equation evaluates to its answer (``values_match``), the shard builder turns the
gold equation into a prefix target, and the scorer evaluates predicted prefixes.
One module over 500 lines because it is one concept, the equations' number grammar: the
tokeniser, the printer and the answer parser read numbers and fractions with the same patterns,
and the evaluator's exactness rests on ``parse_number`` reading what the tokeniser emitted.

What the raw equations of Math23K, MAWPS and APE210K contain, and how each form is read:

- ``x=`` / ``X=`` (or any letters-only name such as MAWPS's ``miles=``) before the expression is
  stripped; an expression without ``=`` is read as is (11 APE210K equations). Anything else with
  ``=`` (MAWPS's ``X-9=4``, ``(7.0*x)+4.0=(3.0*x)-20.0``) is an equation to solve, not an
  expression, and raises ``ExprError``.
- Numbers: ``3``, ``2.5``, ``3,000`` (strict thousands groups). A number followed by ``%`` is one
  percentage token (``"20%"``, value 1/5). ``(...)%`` (APE210K id 290803) divides the group by 100:
  it becomes the tokens of ``((...)/100)``; a slot ``N0%`` likewise becomes ``(N0/100)``.
- Unary plus (six APE210K equations, ``x=+(2000-1999)*1000``) is dropped.
- ``[`` ``]`` are brackets (Math23K) and come out as ``(`` ``)``; each kind must close its own kind.
- ``^`` and ``**`` (APE210K) are the power, right-associative; tokens always say ``^``.
- A mixed number is digits immediately followed by a bracketed simple fraction: ``1(1/2)`` and the
  answer form ``7((2)/(3))`` mean 1 + 1/2 and 7 + 2/3 and become the tokens of ``(1+1/2)``.
  Implicit multiplication is NOT supported: none of the three datasets uses it (every
  ``digit(`` in them is a mixed number, and the one ``)digit``, Math23K id 17520, is garbage), so
  ``2(3+4)``, ``(1)(2)`` or ``(1/6)0`` raise ``ExprError`` ("missing operator").
- ``a:b`` ratios (4 APE210K equations) raise ``ExprError``: ``:`` is not one of ``OPS``.
- Unary minus: ``-`` directly before a plain number literal (not raised to a power) is folded into
  a signed number token (``(-11.0)`` -> ``"-11.0"``, matching MAWPS texts such as "between -11
  and ..."); before anything else ``-a`` becomes ``0 - a`` (``-(1/2)`` -> ``["-", "0", "/", "1",
  "2"]``), so prefix equations never need an operator beyond ``OPS``. ``-3^2`` is ``0-3^2`` = -9.
- Unicode: NFKC folds full-width forms (``（ ） ［ ］ ＋ － ％ ０-９ ＝``); ``× ✕ ∗ · ⋅`` become ``*``,
  ``÷`` ``/``, ``−`` (U+2212) ``-``. Whitespace separates tokens.

Prefix tokens are ``OPS``, number tokens as tokenised (surface text that ``parse_number`` reads)
and slots ``"N0".."Nk"``. Evaluation is exact ``Fraction`` arithmetic for + - * / and integer
powers; a non-integer power, or a float slot value, makes that sub-result a float.
Parsing is recursive descent: brackets nested deeper than about 150 levels raise ``ExprError``
(the datasets nest fewer than 10).
"""
from __future__ import annotations

import math
import re
import unicodedata
from fractions import Fraction
from typing import Sequence, Union

Number = Union[Fraction, float]

OPS = ("+", "-", "*", "/", "^")
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "^": 3}
_MAX_POWER_BITS = 20_000  # an exact power bigger than this (~10^6000) is computed in float instead
# A literal's exponent and length are bounded before it becomes an exact Fraction: "1e999999999"
# would otherwise build a billion-digit integer. Both bounds are far beyond any float.
_MAX_EXPONENT = 400
_MAX_LITERAL_CHARS = 400


class ExprError(ValueError):
    """An equation or answer that cannot be parsed or evaluated; the message says why."""


# Plain number: strict thousands groups ("3,000") or digits, optional decimals.
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER_RE = re.compile(_NUM)
# A number token as it appears in token and prefix lists: optional sign, optional percent.
_NUMBER_TOKEN_RE = re.compile(rf"-?{_NUM}%?")
_SLOT_RE = re.compile(r"N\d+")
_NAME_RE = re.compile(r"[A-Za-z_]+")
_FRAC_PART = r"(?:({n})|\(({n})\))".replace("{n}", r"\d+(?:\.\d+)?")
# The bracketed fraction after the integer part of a mixed number: "(5/6)" or "((2)/(3))".
_MIXED_TAIL_RE = re.compile(rf"\(\s*{_FRAC_PART}\s*/\s*{_FRAC_PART}\s*\)")
_UNICODE_OPS = str.maketrans({"×": "*", "✕": "*", "∗": "*", "·": "*", "⋅": "*",
                              "÷": "/", "−": "-"})


def _normalise(s: str) -> str:
    return unicodedata.normalize("NFKC", s).translate(_UNICODE_OPS).strip()


def _strip_unknown(s: str) -> str:
    """Return the expression side of ``x=expr``; raise for equations that are not solved for x."""
    if "=" not in s:
        return s
    parts = s.split("=")
    if len(parts) > 2:
        raise ExprError(f"more than one '=' in {s!r}")
    lhs, rhs = parts[0].strip(), parts[1]
    if not _NAME_RE.fullmatch(lhs):
        raise ExprError(f"not of the form x=expression (left side {lhs!r}): {s!r}")
    return rhs


def tokenize_infix(s: str) -> list[str]:
    """Tokenise a raw equation or expression, e.g. ``"x=(11-1)*2"`` -> ``["(", "11", "-", "1", ")", "*", "2"]``.

    Output tokens are ``(``, ``)``, ``OPS``, number tokens (``"3"``, ``"2.5"``, ``"20%"``,
    ``"3,000"``; unsigned, the parser folds unary minus) and slots ``"N0"``. See the module
    docstring for every form read. Raises ``ExprError`` on anything else.
    """
    if not isinstance(s, str):
        raise ExprError(f"equation must be a string, got {type(s).__name__}")
    t = _Tokenizer(s)
    s, i, n = t.s, 0, len(t.s)
    while i < n:
        c = s[i]
        if c.isspace():
            i += 1
        elif c.isdecimal():  # what the patterns' \d reads; ፩ and other digit-like signs are not numbers
            i = t.number(i)
        elif c == "." and s[i + 1:i + 2].isdecimal():
            raise ExprError(f"malformed number (no digit before '.') in {t.raw!r}")
        elif c == "*" and s[i + 1:i + 2] == "*":
            t.tokens.append("^")
            i += 2
        elif c in "+-*/^":
            t.tokens.append(c)
            i += 1
        elif c in "([":
            t.opens.append((c, len(t.tokens)))
            t.operand("(")
            i += 1
        elif c in ")]":
            t.close(c)
            i += 1
        elif c == "%":
            t.percent()
            i += 1
        elif c == ":":
            raise ExprError(f"ratio ':' is not an arithmetic operator (not one of {OPS}) in {t.raw!r}")
        elif c == "N" and (m := _SLOT_RE.match(s, i)):
            t.operand(m.group())
            i = m.end()
        else:
            raise ExprError(f"unexpected character {c!r} in {t.raw!r}")
    return t.finish()


class _Tokenizer:
    """One ``tokenize_infix`` call's state: the tokens so far, the open brackets, and where each
    closed group starts (a ``%`` after it wraps the whole group)."""

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.s = _strip_unknown(_normalise(raw))
        self.tokens: list[str] = []
        self.opens: list[tuple[str, int]] = []  # (bracket kind, index of its "(" in tokens)
        self.group_start: dict[int, int] = {}  # index of a ")" -> index of its "("

    def operand(self, tok: str) -> None:
        """Append ``tok``, which starts an operand: never right after another operand."""
        if self.tokens and (self.tokens[-1] == ")" or _is_operand(self.tokens[-1])):
            raise ExprError(f"missing operator between {self.tokens[-1]!r} and {tok!r} "
                            f"(implicit multiplication is not supported) in {self.raw!r}")
        self.tokens.append(tok)

    def number(self, i: int) -> int:
        """The number at ``s[i]`` (a mixed number n(a/b) becomes ( n + a / b )); -> the index after it."""
        s, tokens = self.s, self.tokens
        m = _NUMBER_RE.match(s, i)
        text, j = m.group(), m.end()
        if j < len(s) and (s[j] == "." or s[j] == "," and s[j + 1:j + 2].isdecimal()):
            raise ExprError(f"malformed number at {s[i:j + 2]!r} in {self.raw!r}")
        tail = _MIXED_TAIL_RE.match(s, j) if text.isdecimal() else None
        if not tail:
            self.operand(text)
            return j
        a, b = tail.group(1) or tail.group(2), tail.group(3) or tail.group(4)
        self.operand("(")
        tokens.extend([text, "+", a, "/", b, ")"])
        self.group_start[len(tokens) - 1] = len(tokens) - 7
        return tail.end()

    def close(self, c: str) -> None:
        if not self.opens:
            raise ExprError(f"unbalanced {c!r} in {self.raw!r}")
        kind, start = self.opens.pop()
        if (kind == "(") != (c == ")"):
            raise ExprError(f"{kind!r} closed by {c!r} in {self.raw!r}")
        self.tokens.append(")")
        self.group_start[len(self.tokens) - 1] = start

    def percent(self) -> None:
        """``20%`` is one number token; ``(E)%`` becomes ``((E)/100)``, ``N0%`` ``(N0/100)``."""
        tokens = self.tokens
        last = tokens[-1] if tokens else None
        if last is not None and _NUMBER_TOKEN_RE.fullmatch(last) and not last.endswith("%"):
            tokens[-1] = last + "%"
        elif last == ")" or last is not None and _SLOT_RE.fullmatch(last):
            start = self.group_start[len(tokens) - 1] if last == ")" else len(tokens) - 1
            tokens.insert(start, "(")
            tokens.extend(["/", "100", ")"])
            self.group_start[len(tokens) - 1] = start
        else:
            raise ExprError(f"'%' after {last!r} in {self.raw!r}")

    def finish(self) -> list[str]:
        if self.opens:
            raise ExprError(f"unclosed {self.opens[-1][0]!r} in {self.raw!r}")
        if not self.tokens:
            raise ExprError(f"empty expression in {self.raw!r}")
        return self.tokens


def _is_operand(tok: str) -> bool:
    return bool(_NUMBER_TOKEN_RE.fullmatch(tok) or _SLOT_RE.fullmatch(tok))


class _Parser:
    """Recursive descent: expr := term (+|- term)*; term := unary (*|/ unary)*;
    unary := +|- unary | power; power := atom (^ unary)?; atom := number | slot | ( expr )."""

    def __init__(self, tokens: list[str]):
        self.tokens, self.i = tokens, 0

    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.tokens[j] if j < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ExprError(f"unexpected end of expression {' '.join(self.tokens)!r}")
        self.i += 1
        return tok

    def parse(self):
        tree = self.expr()
        if self.peek() is not None:
            raise ExprError(f"unexpected {self.peek()!r} at token {self.i} of {' '.join(self.tokens)!r}")
        return tree

    def expr(self):
        tree = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            tree = (op, tree, self.term())
        return tree

    def term(self):
        tree = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()
            tree = (op, tree, self.unary())
        return tree

    def unary(self):
        if self.peek() == "+":  # unary plus (APE210K "x=+(2000-1999)*1000") is the identity
            self.take()
            return self.unary()
        if self.peek() != "-":
            return self.power()
        self.take()
        nxt = self.peek()
        if nxt is not None and _NUMBER_TOKEN_RE.fullmatch(nxt) and self.peek(1) != "^":
            self.take()  # fold "-" "11.0" into the signed literal "-11.0"
            return nxt[1:] if nxt.startswith("-") else "-" + nxt
        return ("-", "0", self.unary())

    def power(self):
        base = self.atom()
        if self.peek() == "^":
            self.take()
            return ("^", base, self.unary())  # right-associative: a^b^c = a^(b^c)
        return base

    def atom(self):
        tok = self.take()
        if tok == "(":
            tree = self.expr()
            if self.take() != ")":
                raise ExprError(f"expected ')' at token {self.i - 1} of {' '.join(self.tokens)!r}")
            return tree
        if _is_operand(tok):
            return tok
        raise ExprError(f"unexpected {tok!r} at token {self.i - 1} of {' '.join(self.tokens)!r}")


def _flatten(tree, out: list[str]) -> list[str]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):
            out.append(node[0])
            stack.extend((node[2], node[1]))
        else:
            out.append(node)
    return out


def infix_to_prefix(tokens: list[str]) -> list[str]:
    """Parse infix tokens (from ``tokenize_infix``) into prefix, e.g. ``( 11 - 1 ) * 2`` -> ``* - 11 1 2``."""
    if isinstance(tokens, str):
        raise TypeError("infix_to_prefix takes a token list; call tokenize_infix on a string first")
    try:
        tree = _Parser(list(tokens)).parse()
    except RecursionError:
        raise ExprError("expression nested too deeply") from None
    return _flatten(tree, [])


def _prefix_tree(prefix: Sequence[str]):
    """Prefix list -> nested (op, left, right) tuples; raises ExprError when malformed."""
    stack: list = []
    for tok in reversed(prefix):
        if tok in _PREC:
            if len(stack) < 2:
                raise ExprError(f"malformed prefix {list(prefix)!r}: {tok!r} lacks operands")
            left = stack.pop()
            stack.append((tok, left, stack.pop()))
        elif not isinstance(tok, str):
            raise ExprError(f"malformed prefix {list(prefix)!r}: token {tok!r} is not a string")
        else:
            if not _SLOT_RE.fullmatch(tok):
                parse_number(tok)  # raises for a token that is neither op, slot nor number
            stack.append(tok)
    if len(stack) != 1:
        raise ExprError(f"malformed prefix {list(prefix)!r}: {len(stack)} expressions instead of 1")
    return stack[0]


def _atom_text(tok: str) -> str:
    # Brackets keep a signed literal or a fraction constant one operand when re-tokenised.
    if tok.startswith("-") or ("/" in tok and not tok.startswith("(")):
        return f"({tok})"
    return tok


def prefix_to_infix(prefix: Sequence[str], associative: bool = False) -> str:
    """Prefix -> infix with the fewest brackets, e.g. ``* - 11 1 2`` -> ``"(11-1)*2"``.

    By default brackets are kept exactly where re-reading would otherwise build another tree, so
    ``infix_to_prefix(tokenize_infix(prefix_to_infix(p))) == p`` for every prefix that
    ``infix_to_prefix`` produces: ``N0-(N1-N2)``, ``N0/(N1/N2)``, ``N0+(N1+N2)``, ``(N0^N1)^N2``
    but ``N0^N1^N2``. ``associative=True`` also drops the brackets that do not change the value:
    a ``+``/``-`` right operand of ``+`` and a ``*``/``/`` right operand of ``*``
    (``N0+(N1+N2)`` -> ``N0+N1+N2``); the round trip then keeps the value, not the tree.
    """
    tree = _prefix_tree(prefix)
    if not isinstance(tree, tuple):
        return tree
    # Iterative post-order: each entry is (node, rendered text or None while children pending).
    out: list[str] = []
    stack: list = [(tree, False)]
    while stack:
        node, ready = stack.pop()
        if not isinstance(node, tuple):
            out.append(_atom_text(node))
        elif not ready:
            stack.extend([(node, True), (node[2], False), (node[1], False)])
        else:
            right, left = out.pop(), out.pop()
            op = node[0]
            if _needs_brackets(node[1], op, "left", associative):
                left = f"({left})"
            if _needs_brackets(node[2], op, "right", associative):
                right = f"({right})"
            out.append(f"{left}{op}{right}")
    return out[0]


def slot_index(token: str, n: int) -> int | None:
    """i for a slot token ``Ni`` with i < n, else None."""
    return int(token[1:]) if token[:1] == "N" and token[1:].isdigit() and int(token[1:]) < n else None


def as_written(values: Sequence[float]) -> list[Number]:
    """Quantity values as the exact decimals they print as (a float's shortest repr: the number as
    the text wrote it), so that ``eval_prefix`` on them is exact arithmetic: 1000000.1 - 1000000
    is 0.1, 5.3 - 2.1 - 3.2 is 0. A value that is not finite stays (``eval_prefix`` refuses it)."""
    return [Fraction(repr(v)) if isinstance(v, float) and math.isfinite(v) else v for v in values]


def format_answer(value: float | None) -> str:
    """A value as a person reads it: to ten significant digits, without a decimal point where those
    show a whole number (1234567.5 stays itself, 2.9999999999 reads 3, 2e-10 is not 0); a whole
    number below 1e15 in full (98765432109: ten digits would make up its last one); "none" for no
    value."""
    if value is None or not math.isfinite(value):
        return "none"
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    shown = f"{value:.10g}"
    whole = float(shown)
    # Ten digits of 1e10 or more printed as a whole number would look exact where they are not.
    return str(int(whole)) if whole.is_integer() and abs(whole) < 1e10 else shown


def numbers_written(prefix: Sequence[str], num_texts: Sequence[str]) -> list[str]:
    """``prefix`` with each slot ``Ni`` replaced by the number as written (a slot out of range stays)."""
    slots = [slot_index(t, len(num_texts)) for t in prefix]
    return [t if i is None else num_texts[i] for t, i in zip(prefix, slots)]


def infix_with_numbers(prefix: Sequence[str] | None, num_texts: Sequence[str]) -> str:
    """A prefix equation as readable infix, each slot ``Ni`` replaced by the number as written."""
    if not prefix:
        return ""
    try:
        return prefix_to_infix(numbers_written(prefix, num_texts))
    except ExprError:  # a malformed prediction is shown as the raw prefix it was
        return " ".join(prefix)


def _needs_brackets(child, op: str, side: str, associative: bool) -> bool:
    if not isinstance(child, tuple):
        return False
    child_prec, prec = _PREC[child[0]], _PREC[op]
    if child_prec != prec:
        return child_prec < prec
    if op == "^":
        return side == "left"
    return side == "right" and not (associative and op in "+*")


_PLAIN_RE = re.compile(rf"([+-]?)({_NUM}|\d*\.\d+(?:[eE][+-]?\d+)?|\d+(?:\.\d*)?[eE][+-]?\d+)(%?)")
_FRACTION_RE = re.compile(rf"([+-]?)(\d+\s*)?\(\s*{_FRAC_PART}\s*/\s*{_FRAC_PART}\s*\)")
_BARE_FRACTION_RE = re.compile(r"([+-]?)(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")


def parse_number(s: str | int | float | Fraction) -> Number:
    """Read one number literal exactly: ``"3"``, ``"2.5"``, ``"-7.0"``, ``"20%"`` -> 1/5,
    ``"3,000"``, ``"1e-05"``, fractions ``"(1/5)"``, ``"1/5"``, ``"((3)/(4))"``, mixed numbers
    ``"1(5/6)"``, ``"7((2)/(3))"`` (= 7 + 2/3). Strings give a ``Fraction``; a float stays a float.
    Raises ``ExprError`` for anything else (expressions are ``parse_answer``'s job).
    """
    if isinstance(s, bool):
        raise ExprError(f"not a number: {s!r}")
    if isinstance(s, (int, Fraction)):
        return Fraction(s)
    if isinstance(s, float):
        if not math.isfinite(s):
            raise ExprError(f"not a finite number: {s!r}")
        return s
    if not isinstance(s, str):
        raise ExprError(f"not a number: {s!r}")
    text = _normalise(s)
    if len(text) > _MAX_LITERAL_CHARS:
        raise ExprError(f"number literal longer than {_MAX_LITERAL_CHARS} characters: {s[:40]!r}...")
    if m := _PLAIN_RE.fullmatch(text):
        literal = m.group(2).replace(",", "")
        mantissa, _, exponent = literal.lower().partition("e")
        if exponent and abs(int(exponent)) > _MAX_EXPONENT:
            raise ExprError(f"exponent beyond ±{_MAX_EXPONENT}: {s!r}")
        value = Fraction(literal)
        if m.group(3):
            value /= 100
        return -value if m.group(1) == "-" else value
    m = _FRACTION_RE.fullmatch(text) or _BARE_FRACTION_RE.fullmatch(text)
    if m is None:
        raise ExprError(f"not a number: {s!r}")
    if m.re is _BARE_FRACTION_RE:
        sign, whole, num, den = m.group(1), None, m.group(2), m.group(3)
    else:
        sign, whole = m.group(1), m.group(2)
        num, den = m.group(3) or m.group(4), m.group(5) or m.group(6)
    if Fraction(den) == 0:
        raise ExprError(f"zero denominator in {s!r}")
    value = Fraction(num) / Fraction(den) + (Fraction(int(whole)) if whole else 0)
    return -value if sign == "-" else value


def parse_answer(s: str | float | int) -> float | None:
    """A dataset answer as a float, or None when unreadable.

    Reads numbers, fractions ``((3)/(4))``, mixed numbers ``7((2)/(3))`` / ``1(1/2)``,
    percentages ``20%`` (-> 0.2) and arithmetic expressions such as ``160/(1-20%)`` (APE210K).
    """
    try:
        if isinstance(s, str) and not s.strip():
            return None
        try:
            value = parse_number(s)
        except ExprError:
            if not isinstance(s, str):
                return None
            value = eval_infix(s)
        value = float(value)
    except (ExprError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _power(a: Number, b: Number) -> Number:
    if isinstance(a, Fraction) and isinstance(b, Fraction) and b.denominator == 1:
        e = b.numerator
        if a == 0 and e < 0:
            raise ExprError("division by zero (0 raised to a negative power)")
        bits = max(a.numerator.bit_length(), a.denominator.bit_length()) * abs(e)
        if a in (0, 1, -1) or bits <= _MAX_POWER_BITS:
            return a ** e
    try:
        result = math.pow(float(a), float(b))
    except OverflowError:
        raise ExprError(f"overflow in {a}^{b}") from None
    except ValueError:
        raise ExprError(f"undefined power {a}^{b} (negative base, non-integer exponent, or 0^negative)") from None
    return result


def _apply(op: str, a: Number, b: Number) -> Number:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            raise ExprError("division by zero")
        return a / b
    return _power(a, b)


def _slot_value(tok: str, values: Sequence[Number]) -> Number:
    k = int(tok[1:])
    if k >= len(values):
        raise ExprError(f"slot {tok} but only {len(values)} values")
    v = values[k]
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ExprError(f"slot {tok} has non-finite value {v!r}")
        return v
    return Fraction(v)


def eval_prefix(prefix: Sequence[str], values: Sequence[Number] = ()) -> float:
    """Evaluate a prefix expression; slots ``N0..Nk`` read ``values[k]``.

    Exact ``Fraction`` arithmetic where possible (floats among ``values`` and non-integer powers
    make their sub-results floats). Raises ``ExprError`` when malformed, on an unknown token, a
    missing slot value, division by zero, an undefined power or a result beyond float range.
    """
    if isinstance(prefix, str):
        raise TypeError("eval_prefix takes a token list")
    stack: list[Number] = []
    for tok in reversed(prefix):
        if tok in _PREC:
            if len(stack) < 2:
                raise ExprError(f"malformed prefix {list(prefix)!r}: {tok!r} lacks operands")
            a = stack.pop()
            stack.append(_apply(tok, a, stack.pop()))
        elif not isinstance(tok, str):
            raise ExprError(f"malformed prefix {list(prefix)!r}: token {tok!r} is not a string")
        elif _SLOT_RE.fullmatch(tok):
            stack.append(_slot_value(tok, values))
        else:
            stack.append(parse_number(tok))
    if len(stack) != 1:
        raise ExprError(f"malformed prefix {list(prefix)!r}: {len(stack)} expressions instead of 1")
    try:
        result = float(stack[0])
    except OverflowError:
        raise ExprError("result beyond float range") from None
    if not math.isfinite(result):
        raise ExprError(f"result is not finite ({result})")
    return result


def eval_infix(s: str, values: Sequence[Number] = ()) -> float:
    """Tokenise, parse and evaluate a raw equation such as ``"x=200*(1-20%)"`` (-> 160.0)."""
    return eval_prefix(infix_to_prefix(tokenize_infix(s)), values)


def values_match(a: float, b: float, rel_tol: float = 1e-4, abs_tol: float = 1e-4) -> bool:
    """THE project tolerance: True when ``|a-b| <= abs_tol`` or ``|a-b| <= rel_tol * max(|a|, |b|)``.

    Defaults 1e-4 absolute and 1e-4 relative (dataset answers are often rounded, e.g. MAWPS
    ``0.6667`` for 2/3). None, NaN or infinity never match.
    """
    if a is None or b is None:
        return False
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    diff = abs(a - b)
    return diff <= abs_tol or diff <= rel_tol * max(abs(a), abs(b))


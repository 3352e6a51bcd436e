"""What every SRL backend returns, and the normalisation each one ends with.

Normalised output (all backends)
--------------------------------
POS: every backend tag maps to one of POS_TAGS. Tag sets understood: Universal POS (HanLP UD
models), Penn Treebank (English) and Penn Chinese Treebank, and the ICTCLAS family in lower case
(LTP's 863 tags, jieba's, PKU's: n* → NOUN, v* → VERB, a* → ADJ but ad → ADV, d* → ADV, m* → NUM,
q* → UNIT, p → ADP, r* → PRON, w* → PUNCT, s/f/t/j/eng/ws → NOUN, b/z → ADJ, rest OTHER). Then,
whatever the tagger said: a quantity token (digits with , . / : % and brackets: "20%", "(1/5)",
"3.5", "1,200", "1(5/6)") is NUM; a token made only of punctuation or symbols is PUNCT; a known
unit word (ZH_UNITS / EN_UNITS, plural "s"/"es" accepted in English, or a rate "a/b" of two unit
words such as "km/h", "千米/小时") right after a NUM token or after "per"/"每" is UNIT.
Frames: roles A0/ARG0 → ARG0, A1/ARG1 → ARG1, every other role (A2..A5, ARGM-*, AM-*) → ARGM;
"C-"/"R-" prefixes are dropped; the predicate marker (HanLP's "PRED", "V") is not an argument.
Spans become end-exclusive [start, end) (LTP's are end-inclusive, HanLP's exclusive); a span that
covers its own predicate is split around it. Heads: 1-based with 0 = root (LTP, HanLP) become
0-based with -1 = root.

"""
from __future__ import annotations

import importlib.metadata
import numbers
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

POS_TAGS = ("NOUN", "VERB", "NUM", "UNIT", "ADJ", "ADV", "ADP", "PRON", "PUNCT", "OTHER")
ROLES = ("ARG0", "ARG1", "ARGM")
LANGS = ("zh", "en")


MODEL_OPTION = "--annotator-model (config key data.annotator_model)"
RATE_MARKERS = frozenset({"per", "每"})
ZH_UNITS = frozenset("""
    元 角 吨 克 千克 公斤 斤 米 厘米 分米 毫米 千米 公里 升 毫升 小时 分钟 秒 天 周 倍 度 亩 公顷
    平方米 平方厘米 平方分米 平方千米 立方米 立方厘米 立方分米
    个 只 本 张 条 件 棵 块 台 辆 页 次 箱 袋 瓶 盒 双 支 枝 匹 根 份 套 把 层 间 座 岁
""".split())
EN_UNITS = frozenset("""
    mm cm dm m km meter metre centimeter centimetre millimeter millimetre kilometer kilometre
    inch foot feet yard mile mg g gram kg kilogram lb pound ounce oz ton tonne
    ml l liter litre milliliter millilitre gallon quart pint cup
    s sec second min minute h hr hour day week month year
    dollar cent penny pennies nickel dime quarter euro yuan percent degree dozen mph kph mpg
""".split())

_QUANTITY_CHARS = re.compile(r"[\d.,，:：/%％()（）]+")
_ROLE = re.compile(r"^(?:[CR]-)?(?:A|ARG)(\d)(?:-.*)?$")
_PREDICATE_MARKERS = frozenset({"PRED", "V", "C-V", "REL"})


@dataclass(frozen=True)
class Frame:
    predicate: int                          # token index of the predicate (root)
    args: tuple[tuple[str, int, int], ...]  # (role, start, end): end-exclusive, never containing the predicate


@dataclass(frozen=True)
class Annotation:
    pos: tuple[str, ...]          # one POS_TAGS tag per token
    frames: tuple[Frame, ...]
    heads: tuple[int, ...] | None  # dependency head per token, -1 for the root; None if the backend has none


class AnnotationError(RuntimeError):
    """One problem the backend cannot annotate; the pipeline counts it and goes on."""


class AnnotatorLoadError(ValueError):
    """The backend or its model cannot be loaded at all (fatal: a configuration problem, which a
    command reports in one line)."""


def one_line(error: Exception, limit: int = 300) -> str:
    """An exception as one short line (hub errors span many)."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[:limit] + " ..."


def check_local_model(model: str, backend: str) -> None:
    """A model given as a path (not a hub id) must exist: checked before the backend spends half
    a minute asking a hub for it."""
    path = Path(model).expanduser()
    if (model.startswith((".", "~", "/")) or os.sep in model and path.parent.exists()) and not path.is_dir():
        raise AnnotatorLoadError(f"{MODEL_OPTION} {model!r}: there is no such folder; download the {backend} "
                                 "model on a machine with a network and point the option at its folder")


class Annotator(Protocol):
    name: str
    version: str

    def annotate(self, tokens: Sequence[str], lang: str) -> Annotation: ...


def check_tokens(tokens: Sequence[str]) -> list[str]:
    """The tokens as a list of str, or AnnotationError saying what is wrong with them. Any
    iterable is accepted (Ray Data hands list columns over as numpy arrays), a bare string not."""
    if isinstance(tokens, (str, bytes, Mapping)) or not isinstance(tokens, Iterable):
        raise AnnotationError(f"tokens must be a sequence of strings, got {type(tokens).__name__}")
    tokens = [str(t) if isinstance(t, str) else t for t in tokens]
    if len(tokens) == 0:
        raise AnnotationError("empty token list")
    for i, t in enumerate(tokens):
        if not isinstance(t, str):
            raise AnnotationError(f"token {i} is {type(t).__name__} {t!r}, not a string")
        if not t or any(c.isspace() for c in t):
            raise AnnotationError(f"token {i} {t!r} is empty or contains whitespace")
    return tokens


def check_lang(lang: str, supported: Sequence[str] = LANGS) -> None:
    if lang not in supported:
        raise ValueError(f"language {lang!r} is not supported here; expected one of {tuple(supported)}")


def is_quantity(token: str) -> bool:
    """A number token as numbers.py merges them: "3", "3.5", "1,200", "20%", "(1/5)", "1(5/6)"."""
    return _QUANTITY_CHARS.fullmatch(token) is not None and any(c.isdigit() for c in token)


def _is_punct(token: str) -> bool:
    return all(unicodedata.category(c)[0] in "PS" for c in token)


_UPOS = {"NOUN": "NOUN", "PROPN": "NOUN", "VERB": "VERB", "AUX": "VERB", "NUM": "NUM", "ADJ": "ADJ",
         "ADV": "ADV", "ADP": "ADP", "PRON": "PRON", "PUNCT": "PUNCT"}
_PENN = {  # Penn Treebank (English) and Penn Chinese Treebank; any other upper-case tag is OTHER
    "NN": "NOUN", "NNS": "NOUN", "NNP": "NOUN", "NNPS": "NOUN", "NR": "NOUN", "NT": "NOUN",
    "VB": "VERB", "VBD": "VERB", "VBG": "VERB", "VBN": "VERB", "VBP": "VERB", "VBZ": "VERB",
    "MD": "VERB", "VV": "VERB", "VC": "VERB", "VE": "VERB",
    "CD": "NUM", "OD": "NUM", "M": "UNIT",
    "JJ": "ADJ", "JJR": "ADJ", "JJS": "ADJ", "VA": "ADJ",
    "RB": "ADV", "RBR": "ADV", "RBS": "ADV", "WRB": "ADV", "AD": "ADV",
    "IN": "ADP", "TO": "ADP", "P": "ADP",
    "PRP": "PRON", "PRP$": "PRON", "WP": "PRON", "WP$": "PRON", "EX": "PRON", "PN": "PRON",
    ".": "PUNCT", ",": "PUNCT", ":": "PUNCT", "``": "PUNCT", "''": "PUNCT", "(": "PUNCT", ")": "PUNCT",
    "-LRB-": "PUNCT", "-RRB-": "PUNCT", "HYPH": "PUNCT", "NFP": "PUNCT", "PU": "PUNCT",
}
_ICTCLAS_EXACT = {"ad": "ADV", "eng": "NOUN", "ws": "NOUN", "s": "NOUN", "f": "NOUN", "t": "NOUN",
                  "tg": "NOUN", "j": "NOUN", "b": "ADJ", "z": "ADJ"}
_ICTCLAS_FIRST = {"n": "NOUN", "v": "VERB", "a": "ADJ", "d": "ADV", "m": "NUM", "q": "UNIT", "p": "ADP",
                  "r": "PRON", "w": "PUNCT"}


def coarse_pos(tag: str) -> str:
    """One backend tag (UPOS, Penn/CTB, or ICTCLAS-family lower case) → one of POS_TAGS."""
    if tag in _UPOS:
        return _UPOS[tag]
    if tag in _PENN:
        return _PENN[tag]
    if tag and tag.islower():
        return _ICTCLAS_EXACT.get(tag) or _ICTCLAS_FIRST.get(tag[0], "OTHER")
    return "OTHER"


def is_unit_word(token: str, lang: str) -> bool:
    """A unit word of ZH_UNITS / EN_UNITS (English plurals too), or a rate "a/b" of two of them."""
    if "/" in token:
        parts = token.split("/")
        return len(parts) == 2 and all(p and is_unit_word(p, lang) for p in parts)
    if lang == "zh":
        return token in ZH_UNITS
    w = token.lower()
    return w in EN_UNITS or (w.endswith("s") and w[:-1] in EN_UNITS) or (w.endswith("es") and w[:-2] in EN_UNITS)


def finish_pos(tokens: Sequence[str], pos: Sequence[str], lang: str) -> list[str]:
    """Apply the backend-independent overrides (quantities, punctuation, units) to coarse tags."""
    out = list(pos)
    for i, t in enumerate(tokens):
        if is_quantity(t):
            out[i] = "NUM"
        elif _is_punct(t):
            out[i] = "PUNCT"
        elif i > 0 and (out[i - 1] == "NUM" or tokens[i - 1].lower() in RATE_MARKERS) and is_unit_word(t, lang):
            out[i] = "UNIT"
    return out


def normalise_role(role: str) -> str | None:
    """Backend role label → ARG0 | ARG1 | ARGM, or None for the predicate marker itself."""
    role = role.upper()
    if role in _PREDICATE_MARKERS:
        return None
    m = _ROLE.match(role)
    return ROLES[int(m.group(1))] if m and m.group(1) in "01" else "ARGM"


def normalise_frames(n: int, raw: Sequence[tuple[int, Sequence[tuple[str, int, int]]]]) -> tuple[Frame, ...]:
    """(predicate, [(role, start, end_exclusive)]) from a backend → validated, normalised Frames."""
    frames = []
    for pred, args in raw:
        if not (isinstance(pred, numbers.Integral) and 0 <= pred < n):
            raise AnnotationError(f"predicate index {pred!r} outside the {n} tokens")
        out: set[tuple[str, int, int]] = set()
        for role, start, end in args:
            ints = isinstance(start, numbers.Integral) and isinstance(end, numbers.Integral)
            if not (ints and 0 <= start < end <= n):
                raise AnnotationError(f"argument span [{start!r}, {end!r}) invalid for {n} tokens")
            norm = normalise_role(str(role))
            if norm is None:
                continue
            start, end = int(start), int(end)
            # A span covering its predicate is cut around it: the predicate is the root node.
            pieces = ((start, pred), (pred + 1, end)) if start <= pred < end else ((start, end),)
            out.update((norm, s, e) for s, e in pieces if s < e)
        frames.append(Frame(int(pred), tuple(sorted(out, key=lambda a: (a[1], a[2], a[0])))))
    return tuple(sorted(frames, key=lambda f: f.predicate))


def heads_from_one_based(n: int, heads: Sequence[int]) -> tuple[int, ...]:
    """1-based heads with 0 = root → 0-based with -1 = root, checked against n tokens."""
    if len(heads) != n:
        raise AnnotationError(f"parser gave {len(heads)} heads for {n} tokens")
    out = []
    for i, h in enumerate(heads):
        if not (isinstance(h, numbers.Integral) and 0 <= h <= n and h != i + 1):
            raise AnnotationError(f"token {i} has invalid head {h!r} (1-based, 0 = root, {n} tokens)")
        out.append(int(h) - 1)
    return tuple(out)


def pos_from_tags(tokens: list[str], tags: Any, lang: str, backend: str) -> list[str]:
    if not isinstance(tags, Sequence) or len(tags) != len(tokens) or not all(isinstance(t, str) for t in tags):
        size = len(tags) if isinstance(tags, Sequence) else type(tags).__name__
        raise AnnotationError(f"{backend} POS output ({size}) does not align with the {len(tokens)} tokens")
    return finish_pos(tokens, [coarse_pos(t) for t in tags], lang)


def converted(convert, backend: str, *args) -> Annotation:
    """convert(*args), with a backend output of an unexpected shape reported as AnnotationError."""
    try:
        return convert(*args)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise AnnotationError(f"{backend} output has an unexpected shape: {type(e).__name__}: {e}") from e


def dist_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


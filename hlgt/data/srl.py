"""Tokens → coarse POS + predicate–argument frames (+ dependency heads).

One interface (`Annotator.annotate(tokens, lang) -> Annotation`) over three backends, chosen by
`make_annotator(name, model)` (config `data.annotator`, `data.annotator_model`):

* ``"ltp"``: LTP 4.2 (Chinese; the paper's choice). `pipeline(tokens, tasks=["pos", "srl", "dep"])`
  on the given tokens: leaving "cws" out of the tasks is how LTP 4.2 takes pre-segmented words
  (`is_split_into_words`), so token i of the output is token i of the problem and the N0..Nk
  positions stay aligned. Model: a hub id (``LTP/tiny``, ``LTP/small`` (default), ``LTP/base``)
  or a local directory with config.json, pytorch_model.bin and the tokenizer files. LTP 4.2.14
  loads only with transformers<5 and huggingface_hub<1 (it passes ``use_auth_token`` and calls
  ``batch_encode_plus``); pyproject.toml pins both.
* ``"hanlp"``: a HanLP 2.1 multi-task model (English; the paper's choice). Called on the given
  tokens with ``skip_tasks="tok*"``. Model: a name from ``hanlp.pretrained`` (default
  ``EN_TOK_LEM_POS_NER_SRL_UDEP_SDP_CON_MODERNBERT_BASE``), its URL, or a local model directory.
* ``"offline"`` (name ``offline-jieba-textblob-rules``): needs no download. POS from jieba
  (Chinese: one tag per GIVEN token, never re-segmented: the token's dictionary tag, else the tag
  jieba.posseg gives its last piece) or TextBlob's PatternTagger (English: the space-joined tokens
  tagged in context), frames and heads from the rules below.

Models load lazily, once per process (a Ray actor builds one annotator and reuses it): at the
first `annotate` call, or at `load()` to fail fast. A model that cannot be loaded raises
`AnnotatorLoadError` naming the option to set; nothing is downloaded silently in its place.
One problem the backend cannot handle (empty or malformed tokens, output that does not align
with the tokens, a backend exception) raises `AnnotationError`, which the pipeline counts.

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

Offline rules (the specification of the offline backend; RULES_VERSION changes with them)
----------------------------------------------------------------------------------------
1. Clauses: the tokens split after each clause mark in CLAUSE_PUNCT (，。？！．,.?!;；：:); the
   mark belongs to the clause it ends.
2. Predicates: in each clause, the first token of every run of consecutive VERB tokens. A clause
   with no VERB takes its first copula (是/有; is/are/was/were/am/has/have/had), re-tagged VERB;
   a clause with neither has no frame.
3. Regions: predicate p's ARG0 region runs from the end of the previous predicate's verb run
   (or the clause start) to p; its ARG1 region from the end of p's verb run to the next
   predicate (or the clause end). A region between two predicates is thus ARG1 of the first and
   ARG0 of the second. Spans never contain a predicate or its verb run.
4. Phrases: a region splits before every ADP token (a prepositional phrase runs to the next ADP
   token or the region end) and around every ADV run outside a prepositional phrase.
   Leading/trailing OTHER and PUNCT tokens are trimmed; empty phrases are dropped.
5. Roles: a phrase that starts with ADP or is all ADV is ARGM; any other phrase is ARG0 before
   the predicate, ARG1 after it.
6. Heads (a rule-based tree, so the parse-graph ablation also runs offline): the first
   predicate of the problem is the root (-1); every later predicate depends on the previous
   predicate; every other token on the nearest predicate of its clause (ties: the earlier one),
   or of the whole problem if its clause has none. With no predicate at all, token 0 is the root
   and token i depends on token i-1.
"""
from __future__ import annotations

import bisect
import importlib.metadata
import logging
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
ANNOTATORS = ("offline", "ltp", "hanlp")
LANGS = ("zh", "en")

DEFAULT_LTP_MODEL = "LTP/small"
DEFAULT_HANLP_MODEL = "EN_TOK_LEM_POS_NER_SRL_UDEP_SDP_CON_MODERNBERT_BASE"
OFFLINE_NAME = "offline-jieba-textblob-rules"
RULES_VERSION = "1"

MODEL_OPTION = "--annotator-model (config key data.annotator_model)"
CLAUSE_PUNCT = frozenset("，。？！．,.?!;；：:")
COPULAS = {"zh": frozenset({"是", "有"}),
           "en": frozenset({"is", "are", "was", "were", "am", "has", "have", "had"})}
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


def _one_line(error: Exception, limit: int = 300) -> str:
    """An exception as one short line (hub errors span many)."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _check_local_model(model: str, backend: str) -> None:
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


def make_annotator(name: str, model: str = "") -> Annotator:
    """The annotator called `name` ("offline" | "ltp" | "hanlp"); models load at first use."""
    if name == "offline":
        if model:
            raise ValueError(f"the offline annotator takes no model, got {model!r}: leave {MODEL_OPTION} empty")
        return OfflineAnnotator()
    if name == "ltp":
        return LTPAnnotator(model)
    if name == "hanlp":
        return HanLPAnnotator(model)
    raise ValueError(f"unknown annotator {name!r}; expected one of {ANNOTATORS}")


# ---------------------------------------------------------------------------------------------
# Shared normalisation
# ---------------------------------------------------------------------------------------------

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


def _check_lang(lang: str, supported: Sequence[str] = LANGS) -> None:
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


def _pos_from_tags(tokens: list[str], tags: Any, lang: str, backend: str) -> list[str]:
    if not isinstance(tags, Sequence) or len(tags) != len(tokens) or not all(isinstance(t, str) for t in tags):
        size = len(tags) if isinstance(tags, Sequence) else type(tags).__name__
        raise AnnotationError(f"{backend} POS output ({size}) does not align with the {len(tokens)} tokens")
    return finish_pos(tokens, [coarse_pos(t) for t in tags], lang)


def _converted(convert, backend: str, *args) -> Annotation:
    """convert(*args), with a backend output of an unexpected shape reported as AnnotationError."""
    try:
        return convert(*args)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise AnnotationError(f"{backend} output has an unexpected shape: {type(e).__name__}: {e}") from e


def _dist_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


# ---------------------------------------------------------------------------------------------
# Offline backend: jieba / TextBlob POS + the rules of the module docstring
# ---------------------------------------------------------------------------------------------

class OfflineAnnotator:
    """POS from jieba (zh) or TextBlob's PatternTagger (en); frames and heads from rules 1-6."""

    name = OFFLINE_NAME

    def __init__(self) -> None:
        self.version = f"{RULES_VERSION}+jieba-{_dist_version('jieba')}+textblob-{_dist_version('textblob')}"
        self._word_tags: dict[str, str] | None = None
        self._posseg: Any = None
        self._pattern: Any = None
        self._zh_cache: dict[str, str] = {}

    def __reduce__(self):
        # Pickle (e.g. to a Ray actor) as a fresh annotator: each process loads its own dictionaries.
        return (OfflineAnnotator, ())

    def load(self) -> OfflineAnnotator:
        """Load jieba's dictionaries and the Pattern lexicon once (about a second)."""
        if self._word_tags is None:
            try:
                import jieba
                import jieba.posseg
                from textblob.en.taggers import PatternTagger
            except ImportError as e:
                raise AnnotatorLoadError(f"the offline annotator needs jieba and textblob: {e}") from e
            jieba.setLogLevel(logging.WARNING)
            jieba.posseg.dt.initialize()
            self._posseg = jieba.posseg
            self._pattern = PatternTagger()
            self._pattern.tag("a", tokenize=False)
            self._word_tags = jieba.posseg.dt.word_tag_tab
        return self

    def annotate(self, tokens: Sequence[str], lang: str) -> Annotation:
        tokens = check_tokens(tokens)
        _check_lang(lang)
        self.load()
        # Quantities skip jieba (they become NUM anyway) so the tag cache holds words only.
        tags = [("m" if is_quantity(t) else self._tag_zh(t)) for t in tokens] if lang == "zh" else self._tag_en(tokens)
        pos = finish_pos(tokens, [coarse_pos(t) for t in tags], lang)
        clauses = _clauses(tokens)
        frames, pos = _rule_frames(tokens, pos, lang, clauses)
        return Annotation(tuple(pos), frames, _rule_heads(len(tokens), clauses, frames))

    def _tag_zh(self, token: str) -> str:
        """jieba's tag of one given token: its dictionary tag, else the tag of the last piece
        posseg cuts it into (the head of a Chinese compound is its last part)."""
        tag = self._zh_cache.get(token)
        if tag is None:
            tag = self._word_tags.get(token) or self._posseg.lcut(token)[-1].flag
            self._zh_cache[token] = tag
        return tag

    def _tag_en(self, tokens: list[str]) -> list[str]:
        """Pattern tags the space-joined tokens in context (tokenize=False keeps them 1:1); if it
        ever splits or merges a token, each token is tagged on its own instead."""
        tagged = self._pattern.tag(" ".join(tokens), tokenize=False)
        if [w for w, _ in tagged] != tokens:
            return [next((tag for _, tag in self._pattern.tag(t, tokenize=False)), "") for t in tokens]
        return [tag for _, tag in tagged]


def _clauses(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """Rule 1: [start, end) spans, each ending after a clause mark (or at the last token)."""
    out, start = [], 0
    for i, t in enumerate(tokens):
        if t in CLAUSE_PUNCT:
            out.append((start, i + 1))
            start = i + 1
    if start < len(tokens):
        out.append((start, len(tokens)))
    return out


def _rule_frames(tokens: Sequence[str], pos: list[str], lang: str,
                 clauses: list[tuple[int, int]]) -> tuple[tuple[Frame, ...], list[str]]:
    """Rules 2-5; returns the frames and the POS (a copula predicate is re-tagged VERB)."""
    pos = list(pos)
    frames = []
    for cs, ce in clauses:
        runs = []  # (predicate, end of its verb run)
        i = cs
        while i < ce:
            if pos[i] == "VERB":
                j = i
                while j < ce and pos[j] == "VERB":
                    j += 1
                runs.append((i, j))
                i = j
            else:
                i += 1
        if not runs:
            cop = next((k for k in range(cs, ce) if tokens[k].lower() in COPULAS[lang]), None)
            if cop is None:
                continue
            pos[cop] = "VERB"
            runs = [(cop, cop + 1)]
        for k, (p, run_end) in enumerate(runs):
            left = runs[k - 1][1] if k else cs
            right = runs[k + 1][0] if k + 1 < len(runs) else ce
            frames.append(Frame(p, tuple(_phrases(pos, left, p, "ARG0") + _phrases(pos, run_end, right, "ARG1"))))
    return tuple(frames), pos


def _phrases(pos: Sequence[str], start: int, end: int, core: str) -> list[tuple[str, int, int]]:
    """Rules 4-5 on the region [start, end): role-labelled phrases."""
    spans: list[list[int]] = []  # [start, end, kind] with kind "pp" | "adv" | "core"
    for i in range(start, end):
        tag = pos[i]
        kind = spans[-1][2] if spans else None
        if tag == "ADP":
            spans.append([i, i + 1, "pp"])
        elif tag == "ADV" and kind not in ("pp", "adv"):
            spans.append([i, i + 1, "adv"])
        elif tag != "ADV" and kind in ("adv", None):
            spans.append([i, i + 1, "core"])
        else:
            spans[-1][1] = i + 1
    out = []
    for s, e, kind in spans:
        while s < e and pos[s] in ("OTHER", "PUNCT"):
            s += 1
        while e > s and pos[e - 1] in ("OTHER", "PUNCT"):
            e -= 1
        if s < e:
            out.append(("ARGM" if kind in ("pp", "adv") else core, s, e))
    return out


def _rule_heads(n: int, clauses: list[tuple[int, int]], frames: Sequence[Frame]) -> tuple[int, ...]:
    """Rule 6: a dependency tree built from the predicates."""
    preds = [f.predicate for f in frames]
    if not preds:
        return (-1,) + tuple(range(n - 1))
    heads = [-1] * n
    for cs, ce in clauses:
        local = [p for p in preds if cs <= p < ce] or preds
        for t in range(cs, ce):
            k = bisect.bisect_left(local, t)
            near = [local[j] for j in (k - 1, k) if 0 <= j < len(local)]
            heads[t] = min(near, key=lambda p: (abs(p - t), p))
    for k, p in enumerate(preds):
        heads[p] = preds[k - 1] if k else -1
    return tuple(heads)


# ---------------------------------------------------------------------------------------------
# LTP 4.2 (Chinese)
# ---------------------------------------------------------------------------------------------

class LTPAnnotator:
    """LTP 4.2's pos/srl/dep on pre-segmented tokens. `backend` injects an already loaded model
    (anything with LTP's `pipeline(tokens, tasks=...)` and `supported_tasks`)."""

    name = "ltp"
    TASKS = ("pos", "srl", "dep")

    def __init__(self, model: str = "", backend: Any = None) -> None:
        self.model = model or DEFAULT_LTP_MODEL
        self.version = f"ltp-{_dist_version('ltp')}:{self.model}"
        self._ltp = None
        if backend is not None:
            self._ltp = self._checked(backend)

    def load(self) -> LTPAnnotator:
        if self._ltp is None:
            _check_local_model(self.model, "LTP")
            try:
                from ltp import LTP

                backend = LTP(self.model)
            except Exception as e:
                raise AnnotatorLoadError(
                    f"cannot load the LTP model {self.model!r} ({_one_line(e)}). Download it (the Hugging Face "
                    f"repository {self.model if '/' in self.model else DEFAULT_LTP_MODEL}: config.json, "
                    f"pytorch_model.bin and the tokenizer files) on a machine with a network and point {MODEL_OPTION} "
                    "at its folder, or set it to a hub id reachable from here (LTP/tiny, LTP/small, LTP/base). LTP 4.2.14 "
                    "loads with transformers<5 and huggingface_hub<1 (installed: ltp "
                    f"{_dist_version('ltp')}, transformers {_dist_version('transformers')}, "
                    f"huggingface_hub {_dist_version('huggingface_hub')})."
                ) from e
            self._ltp = self._checked(backend)
        return self

    def _checked(self, backend: Any) -> Any:
        missing = set(self.TASKS) - set(getattr(backend, "supported_tasks", ()))
        if missing:
            raise AnnotatorLoadError(
                f"the LTP model {self.model!r} cannot do {sorted(missing)} (LTP/legacy has only cws/pos/ner); "
                f"set {MODEL_OPTION} to LTP/tiny, LTP/small or LTP/base")
        return backend

    def annotate(self, tokens: Sequence[str], lang: str) -> Annotation:
        tokens = check_tokens(tokens)
        _check_lang(lang, ("zh",))
        self.load()
        try:
            # No "cws" in the tasks: LTP takes the tokens as given words (is_split_into_words).
            out = self._ltp.pipeline(tokens, tasks=list(self.TASKS))
        except Exception as e:
            raise AnnotationError(f"LTP failed on this problem: {type(e).__name__}: {e}") from e
        return _converted(self.convert, "LTP", tokens, out)

    @staticmethod
    def convert(tokens: list[str], out: Mapping[str, Any]) -> Annotation:
        """LTP 4.2 single-sentence output → Annotation. Shapes (ltp/nerual.py): out["pos"] a tag
        per word; out["srl"] [{"index", "predicate", "arguments": [(role, text, start, end)]}] with
        end-INCLUSIVE spans; out["dep"] {"head": [1-based, 0 = root], "label": [...]}."""
        n = len(tokens)
        pos = _pos_from_tags(tokens, out["pos"], "zh", "LTP")
        raw = []
        for item in out["srl"]:
            p = item["index"]
            if "predicate" in item and 0 <= p < n and item["predicate"] != tokens[p]:
                raise AnnotationError(f"LTP predicate {item['predicate']!r} at {p} is not token {tokens[p]!r}")
            raw.append((p, [(role, start, end + 1) for role, _text, start, end in item["arguments"]]))
        return Annotation(tuple(pos), normalise_frames(n, raw), heads_from_one_based(n, out["dep"]["head"]))


# ---------------------------------------------------------------------------------------------
# HanLP 2.1 multi-task model (English)
# ---------------------------------------------------------------------------------------------

class HanLPAnnotator:
    """A HanLP multi-task model's pos/srl/dep on pre-tokenised input. `backend` injects an
    already loaded model (callable like HanLP's MultiTaskLearning, with a `tasks` mapping)."""

    name = "hanlp"

    def __init__(self, model: str = "", backend: Any = None) -> None:
        self.model = model or DEFAULT_HANLP_MODEL
        self.version = f"hanlp-{_dist_version('hanlp')}:{self.model}"
        self._mtl = None
        if backend is not None:
            self._use(backend)

    def load(self) -> HanLPAnnotator:
        if self._mtl is None:
            _check_local_model(self.model, "HanLP")
            try:
                import hanlp

                backend = hanlp.load(self.model)
            except Exception as e:
                raise AnnotatorLoadError(
                    f"cannot load the HanLP model {self.model!r} ({_one_line(e)}). Download it (the archive "
                    "hanlp.pretrained.mtl names) on a machine with a network, unpack it and point "
                    f"{MODEL_OPTION} at its folder (with config.json), or set it to a hanlp.pretrained.mtl name "
                    "or URL reachable from here; its transformer encoder must be in "
                    f"the Hugging Face cache too. Installed: hanlp {_dist_version('hanlp')}, transformers "
                    f"{_dist_version('transformers')} (the English ModernBERT models need transformers>=4.48)."
                ) from e
            self._use(backend)
        return self

    def _use(self, backend: Any) -> None:
        """Pick the task names this model has: pos (or ud, or the first pos/*), srl, dep (or ud)."""
        names = list(getattr(backend, "tasks", None) or ())
        pos_task = next((t for t in ("pos", "ud", "pos/863", "pos/ctb", "pos/pku") if t in names),
                        next((t for t in names if t.startswith("pos")), None))
        dep_task = next((t for t in ("dep", "ud") if t in names), None)
        if pos_task is None or "srl" not in names:
            raise AnnotatorLoadError(
                f"the HanLP model {self.model!r} has tasks {names}, without pos and srl; "
                f"set {MODEL_OPTION} to a multi-task model with both (default {DEFAULT_HANLP_MODEL})")
        self._pos_key = "pos" if pos_task == "ud" else pos_task  # UD parsers promote upos to doc["pos"]
        self._dep_key = "dep" if dep_task else None
        self._tasks = sorted({pos_task, "srl"} | ({dep_task} if dep_task else set()))
        self._mtl = backend

    def annotate(self, tokens: Sequence[str], lang: str) -> Annotation:
        tokens = check_tokens(tokens)
        _check_lang(lang)
        self.load()
        try:
            doc = self._mtl(tokens, tasks=self._tasks, skip_tasks="tok*")
        except Exception as e:
            raise AnnotationError(f"HanLP failed on this problem: {type(e).__name__}: {e}") from e
        return _converted(self.convert, "HanLP", tokens, doc, lang, self._pos_key, self._dep_key)

    @staticmethod
    def convert(tokens: list[str], doc: Mapping[str, Any], lang: str,
                pos_key: str = "pos", dep_key: str | None = "dep") -> Annotation:
        """HanLP Document for one sentence → Annotation. Shapes (hanlp/components/srl): doc["srl"]
        one list per predicate of (text, role, start, end) with end-EXCLUSIVE spans and the
        predicate itself as a "PRED" entry; doc["dep"] [(head, relation)] 1-based, 0 = root."""
        n = len(tokens)
        pos = _pos_from_tags(tokens, doc[pos_key], lang, "HanLP")
        raw = []
        for pas in doc["srl"]:
            preds = [start for _text, role, start, _end in pas if role == "PRED"]
            if len(preds) != 1:
                raise AnnotationError(f"HanLP predicate-argument structure with {len(preds)} PRED entries")
            raw.append((preds[0], [(role, start, end) for _text, role, start, end in pas]))
        heads = heads_from_one_based(n, [h for h, _rel in doc[dep_key]]) if dep_key else None
        return Annotation(tuple(pos), normalise_frames(n, raw), heads)

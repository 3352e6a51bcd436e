"""The offline backend: POS from jieba (zh) or TextBlob's PatternTagger (en), frames and heads from
the rules below.

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
import logging
from collections.abc import Sequence
from typing import Any

from hlgt.data.srl.common import (
    Annotation,
    AnnotatorLoadError,
    Frame,
    check_lang,
    check_tokens,
    coarse_pos,
    dist_version,
    finish_pos,
    is_quantity,
)

# jieba and TextBlob are imported when the annotator loads (once per process, in each Ray actor):
# jieba reads its dictionary, and the GPU machines lack it.

OFFLINE_NAME = "offline-jieba-textblob-rules"
RULES_VERSION = "1"
CLAUSE_PUNCT = frozenset("，。？！．,.?!;；：:")
COPULAS = {"zh": frozenset({"是", "有"}),
           "en": frozenset({"is", "are", "was", "were", "am", "has", "have", "had"})}

class OfflineAnnotator:
    """POS from jieba (zh) or TextBlob's PatternTagger (en); frames and heads from rules 1-6."""

    name = OFFLINE_NAME

    def __init__(self) -> None:
        self.version = f"{RULES_VERSION}+jieba-{dist_version('jieba')}+textblob-{dist_version('textblob')}"
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
        check_lang(lang)
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


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
  tagged in context), frames and heads from the rules of ``offline``.

Models load lazily, once per process (a Ray actor builds one annotator and reuses it): at the
first `annotate` call, or at `load()` to fail fast. A model that cannot be loaded raises
`AnnotatorLoadError` naming the option to set; nothing is downloaded silently in its place.
One problem the backend cannot handle (empty or malformed tokens, output that does not align
with the tokens, a backend exception) raises `AnnotationError`, which the pipeline counts.

The types and the normalisation every backend ends with: ``common``; the offline backend and its
rules: ``offline``; the LTP and HanLP adapters: ``models``.
"""
from __future__ import annotations

from hlgt.config import ANNOTATORS
from hlgt.data.srl.common import (
    LANGS,
    MODEL_OPTION,
    POS_TAGS,
    ROLES,
    Annotation,
    AnnotationError,
    Annotator,
    AnnotatorLoadError,
    Frame,
)
from hlgt.data.srl.models import HanLPAnnotator, LTPAnnotator
from hlgt.data.srl.offline import OfflineAnnotator

__all__ = ["ANNOTATORS", "LANGS", "POS_TAGS", "ROLES", "Annotation", "AnnotationError", "Annotator",
           "AnnotatorLoadError", "Frame", "HanLPAnnotator", "LTPAnnotator", "OfflineAnnotator", "make_annotator"]


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

"""The adapters of the model backends, LTP 4.2 (Chinese) and HanLP 2.1 (English): a model loaded
once per process, called on the given tokens, its output normalised as ``common`` says."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hlgt.data.srl.common import (
    MODEL_OPTION,
    Annotation,
    AnnotationError,
    AnnotatorLoadError,
    check_lang,
    check_local_model,
    check_tokens,
    converted,
    dist_version,
    heads_from_one_based,
    normalise_frames,
    one_line,
    pos_from_tags,
)

# ltp and hanlp are imported when their model loads: seconds of import (transformers), and most
# builds use the offline annotator.

DEFAULT_LTP_MODEL = "LTP/small"
DEFAULT_HANLP_MODEL = "EN_TOK_LEM_POS_NER_SRL_UDEP_SDP_CON_MODERNBERT_BASE"

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
        self.version = f"ltp-{dist_version('ltp')}:{self.model}"
        self._ltp = None
        if backend is not None:
            self._ltp = self._checked(backend)

    def load(self) -> LTPAnnotator:
        if self._ltp is None:
            check_local_model(self.model, "LTP")
            try:
                from ltp import LTP

                backend = LTP(self.model)
            except Exception as e:
                raise AnnotatorLoadError(
                    f"cannot load the LTP model {self.model!r} ({one_line(e)}). Download it (the Hugging Face "
                    f"repository {self.model if '/' in self.model else DEFAULT_LTP_MODEL}: config.json, "
                    f"pytorch_model.bin and the tokenizer files) on a machine with a network and point {MODEL_OPTION} "
                    "at its folder, or set it to a hub id reachable from here (LTP/tiny, LTP/small, LTP/base). "
                    "LTP 4.2.14 loads with transformers<5 and huggingface_hub<1 (installed: ltp "
                    f"{dist_version('ltp')}, transformers {dist_version('transformers')}, "
                    f"huggingface_hub {dist_version('huggingface_hub')})."
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
        check_lang(lang, ("zh",))
        self.load()
        try:
            # No "cws" in the tasks: LTP takes the tokens as given words (is_split_into_words).
            out = self._ltp.pipeline(tokens, tasks=list(self.TASKS))
        except Exception as e:
            raise AnnotationError(f"LTP failed on this problem: {type(e).__name__}: {e}") from e
        return converted(self.convert, "LTP", tokens, out)

    @staticmethod
    def convert(tokens: list[str], out: Mapping[str, Any]) -> Annotation:
        """LTP 4.2 single-sentence output → Annotation. Shapes (ltp/nerual.py): out["pos"] a tag
        per word; out["srl"] [{"index", "predicate", "arguments": [(role, text, start, end)]}] with
        end-INCLUSIVE spans; out["dep"] {"head": [1-based, 0 = root], "label": [...]}."""
        n = len(tokens)
        pos = pos_from_tags(tokens, out["pos"], "zh", "LTP")
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
        self.version = f"hanlp-{dist_version('hanlp')}:{self.model}"
        self._mtl = None
        if backend is not None:
            self._use(backend)

    def load(self) -> HanLPAnnotator:
        if self._mtl is None:
            check_local_model(self.model, "HanLP")
            try:
                import hanlp

                backend = hanlp.load(self.model)
            except Exception as e:
                raise AnnotatorLoadError(
                    f"cannot load the HanLP model {self.model!r} ({one_line(e)}). Download it (the archive "
                    "hanlp.pretrained.mtl names) on a machine with a network, unpack it and point "
                    f"{MODEL_OPTION} at its folder (with config.json), or set it to a hanlp.pretrained.mtl name "
                    "or URL reachable from here; its transformer encoder must be in "
                    f"the Hugging Face cache too. Installed: hanlp {dist_version('hanlp')}, transformers "
                    f"{dist_version('transformers')} (the English ModernBERT models need transformers>=4.48)."
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
        check_lang(lang)
        self.load()
        try:
            doc = self._mtl(tokens, tasks=self._tasks, skip_tasks="tok*")
        except Exception as e:
            raise AnnotationError(f"HanLP failed on this problem: {type(e).__name__}: {e}") from e
        return converted(self.convert, "HanLP", tokens, doc, lang, self._pos_key, self._dep_key)

    @staticmethod
    def convert(tokens: list[str], doc: Mapping[str, Any], lang: str,
                pos_key: str = "pos", dep_key: str | None = "dep") -> Annotation:
        """HanLP Document for one sentence → Annotation. Shapes (hanlp/components/srl): doc["srl"]
        one list per predicate of (text, role, start, end) with end-EXCLUSIVE spans and the
        predicate itself as a "PRED" entry; doc["dep"] [(head, relation)] 1-based, 0 = root."""
        n = len(tokens)
        pos = pos_from_tags(tokens, doc[pos_key], lang, "HanLP")
        raw = []
        for pas in doc["srl"]:
            preds = [start for _text, role, start, _end in pas if role == "PRED"]
            if len(preds) != 1:
                raise AnnotationError(f"HanLP predicate-argument structure with {len(preds)} PRED entries")
            raw.append((preds[0], [(role, start, end) for _text, role, start, end in pas]))
        heads = heads_from_one_based(n, [h for h, _rel in doc[dep_key]]) if dep_key else None
        return Annotation(tuple(pos), normalise_frames(n, raw), heads)

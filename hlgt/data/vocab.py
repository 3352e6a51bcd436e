"""Vocabularies: input words and decoder outputs, learned on the training split only.

Input ids: ``<pad>``=0, ``<unk>``=1, ``NUM``=2 (every quantity token is read as NUM, as in GTS:
the model sees a number's context and copies its representation, never its digits), then words.
Decoder ids: the operators, then the learned constants, then the problem's own slots:
``N{i}`` has id ``len(outputs) + i``, so the output space grows with the number of quantities.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from hlgt.expr import OPS

PAD, UNK, NUM = "<pad>", "<unk>", "NUM"


@dataclass
class Vocab:
    words: list[str]
    outputs: list[str]  # OPS in order, then constants
    _word_ids: dict[str, int] = field(init=False, repr=False, compare=False)
    _output_ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.words[:3] != [PAD, UNK, NUM]:
            raise ValueError(f"input vocabulary must start with {[PAD, UNK, NUM]}, got {self.words[:3]}")
        if tuple(self.outputs[: len(OPS)]) != OPS:
            raise ValueError(f"output vocabulary must start with the operators {OPS}, got {self.outputs[:len(OPS)]}")
        self._word_ids = {w: i for i, w in enumerate(self.words)}
        self._output_ids = {t: i for i, t in enumerate(self.outputs)}

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], constants: Sequence[str], min_freq: int = 1) -> "Vocab":
        """Words seen ``min_freq`` times in the training texts (quantity tokens already replaced by NUM)."""
        counts = Counter(w for tokens in token_lists for w in tokens if w not in (PAD, UNK, NUM))
        words = [PAD, UNK, NUM] + sorted(w for w, c in counts.items() if c >= min_freq)
        return cls(words=words, outputs=list(OPS) + list(constants))

    @property
    def n_ops(self) -> int:
        return len(OPS)

    @property
    def constants(self) -> list[str]:
        return self.outputs[len(OPS):]

    def word_id(self, word: str) -> int:
        return self._word_ids.get(word, self._word_ids[UNK])

    def output_id(self, token: str) -> int | None:
        """Decoder id of an operator, a learned constant or a slot ``N{i}``; None if not representable."""
        if token in self._output_ids:
            return self._output_ids[token]
        if token.startswith("N") and token[1:].isdigit():
            return len(self.outputs) + int(token[1:])
        return None

    def output_token(self, index: int) -> str:
        if index < len(self.outputs):
            return self.outputs[index]
        return f"N{index - len(self.outputs)}"

    def to_dict(self) -> dict:
        return {"words": list(self.words), "outputs": list(self.outputs)}

    @classmethod
    def from_dict(cls, d: dict) -> "Vocab":
        return cls(words=list(d["words"]), outputs=list(d["outputs"]))

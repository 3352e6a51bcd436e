"""Vocabularies: input words and decoder outputs, learned on the training split only.

Input ids: ``<pad>``=0, ``<unk>``=1, ``NUM``=2 (every quantity token is read as NUM, as in GTS:
the model sees a number's context and copies its representation, never its digits), then words.
Decoder ids: the operators, then the learned constants, then the problem's own slots:
``N{i}`` has id ``len(outputs) + i``, so the output space grows with the number of quantities.

``read_word_vectors`` picks the vocabulary's words out of a pretrained vector file (the paper
starts its word embedding from 300-dimension vectors).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from hlgt.expr import OPS

PAD, UNK, NUM = "<pad>", "<unk>", "NUM"


def words_read(example) -> list[str]:
    """An example's tokens as the model reads them: NUM at every quantity's position."""
    slots = {q.position for q in example.quantities}
    return [NUM if i in slots else t for i, t in enumerate(example.tokens)]


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
        """The vocabulary ``to_dict`` wrote; anything else is a ValueError saying what it lacks."""
        lists = [d.get(key) for key in ("words", "outputs")]
        if not all(isinstance(v, list) and all(isinstance(t, str) for t in v) for v in lists):
            raise ValueError("a vocabulary is an object with 'words' and 'outputs', each a list of strings")
        return cls(words=list(d["words"]), outputs=list(d["outputs"]))


@dataclass
class WordVectors:
    ids: list[int]  # input ids of the vocabulary words found in the file
    vectors: list[list[float]]  # their vectors, in the same order
    lines: int  # vector lines read
    malformed: int  # lines skipped: not a word and ``dim`` numbers (e.g. a word with a space)


def read_word_vectors(path: str | Path, vocab: Vocab, dim: int) -> WordVectors:
    """The vectors of ``vocab``'s words in a word2vec/GloVe text file: one ``word x1 ... xd`` per
    line, an optional ``count dim`` first line. Read line by line (files of several GB are
    fine); the first occurrence of a word wins. Vectors of another dimension than ``dim`` (the
    embedding size) are an error on the first vector line; binary word2vec files are not read."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"word vector file {path} not found")
    wanted = {w: i for i, w in enumerate(vocab.words) if w not in (PAD, UNK, NUM)}
    found: dict[int, list[float]] = {}
    lines = malformed = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f):
            parts = line.rstrip("\n").rstrip().split(" ")
            if n == 0 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # word2vec header: count dim
            lines += 1
            if len(parts) != dim + 1:
                if lines == 1:
                    raise ValueError(f"{path} holds {len(parts) - 1}-dimension vectors, the embedding has {dim}: "
                                     f"set model.embedding_size={len(parts) - 1}")
                malformed += 1
                continue
            index = wanted.get(parts[0])
            if index is None or index in found:
                continue
            try:
                found[index] = [float(x) for x in parts[1:]]
            except ValueError:
                malformed += 1
    ids = sorted(found)
    return WordVectors(ids=ids, vectors=[found[i] for i in ids], lines=lines, malformed=malformed)

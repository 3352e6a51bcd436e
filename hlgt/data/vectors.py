"""Word vectors trained on a shard folder's own training texts: the stand-in for the paper's
pretrained word vectors, which cannot be downloaded here (the command: ``hlgt-vectors``).

``corpus`` reads the ``train`` split's tokens (quantities already read as NUM), ``train_vectors``
trains word2vec's skip-gram with negative sampling on them, and ``write_vectors`` writes a
word2vec text file (``count dim`` header, then ``word x1 ... xd`` per line) that ``--set
train.word_vectors=vectors.txt`` loads into the word embedding. Only the training split is read, so no validation or test text shapes the vectors.

Skip-gram as in word2vec: for every token, the words up to ``window`` positions away (the window
shrunk at random per token, so near words count more) are its contexts; each (word, context) pair
is scored against ``negatives`` words drawn from the unigram distribution to the power 0.75.
Frequent words are subsampled (word2vec's ``sample``). The written vectors are the input
vectors, rescaled so that their elements have standard deviation 1: the embedding rows they
replace start as N(0, 1), like the rows of words the file lacks (and <unk>, NUM).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from torch import Tensor, nn

from hlgt.data.schema import example_from_row
from hlgt.data.shards import load_rows
from hlgt.data.vocab import NUM, PAD, UNK, words_read
from hlgt.files import replacing


def corpus(shards_dir: str | Path) -> list[list[str]]:
    """The training split's token lists as the model reads them: NUM at every quantity."""
    return [words_read(example_from_row(row)) for row in load_rows(shards_dir, "train")]


def skipgram_pairs(sentences: list[list[int]], window: int, keep: Tensor, gen: torch.Generator) -> Tensor:
    """(word, context) id pairs [P, 2] of one epoch: frequent words subsampled with probability
    1 - keep[id], each remaining token's window drawn uniformly from 1..window."""
    pairs = []
    for ids in sentences:
        t = torch.tensor(ids, dtype=torch.long)
        t = t[torch.rand(len(t), generator=gen) < keep[t]]
        n = len(t)
        if n < 2:
            continue
        reach = torch.randint(1, window + 1, (n,), generator=gen)             # [n] window per token
        for offset in range(1, window + 1):
            if offset >= n:
                break
            left, right = t[:-offset], t[offset:]                             # pairs `offset` apart
            pairs.append(torch.stack([left, right], 1)[reach[:-offset] >= offset])   # left's context
            pairs.append(torch.stack([right, left], 1)[reach[offset:] >= offset])    # right's context
    return torch.cat(pairs) if pairs else torch.zeros(0, 2, dtype=torch.long)


class SkipGram(nn.Module):
    def __init__(self, words: int, dim: int):
        super().__init__()
        self.inp = nn.Embedding(words, dim)
        self.out = nn.Embedding(words, dim)
        nn.init.uniform_(self.inp.weight, -0.5 / dim, 0.5 / dim)  # word2vec's initialisation
        nn.init.zeros_(self.out.weight)

    def loss(self, pairs: Tensor, negatives: Tensor) -> Tensor:
        """pairs [P, 2], negatives [P, K] -> mean negative-sampling loss."""
        w = self.inp(pairs[:, 0])                                             # [P, d]
        pos = (w * self.out(pairs[:, 1])).sum(-1)                             # [P]
        neg = torch.einsum("pd,pkd->pk", w, self.out(negatives))             # [P, K]
        return -(nn.functional.logsigmoid(pos).mean() + nn.functional.logsigmoid(-neg).sum(-1).mean())


def train_vectors(sentences: list[list[str]], dim: int = 128, window: int = 5, negatives: int = 5,
                  epochs: int = 5, min_count: int = 2, sample: float = 1e-3, batch: int = 4096,
                  lr: float = 0.01, seed: int = 1, log=print) -> dict[str, list[float]]:
    """Skip-gram vectors of the words seen ``min_count`` times (NUM, <pad> and <unk> excluded)."""
    counts = Counter(w for s in sentences for w in s)
    words = sorted(w for w, c in counts.items() if c >= min_count and w not in (PAD, UNK, NUM))
    if not words:
        raise ValueError(f"no word occurs {min_count} times in the training texts: nothing to train vectors on")
    index = {w: i for i, w in enumerate(words)}
    freq = torch.tensor([counts[w] for w in words], dtype=torch.float)
    # word2vec's subsampling: keep a word with probability (sqrt(f / s) + 1) * s / f, f its share.
    share = freq / freq.sum()
    keep = ((share / sample).sqrt() + 1) * sample / share
    noise = freq.pow(0.75)
    ids = [[index[w] for w in s if w in index] for s in sentences]
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = SkipGram(len(words), dim)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for epoch in range(1, epochs + 1):
        pairs = skipgram_pairs(ids, window, keep, gen)
        pairs = pairs[torch.randperm(len(pairs), generator=gen)]
        total = 0.0
        for start in range(0, len(pairs), batch):
            chunk = pairs[start:start + batch]
            neg = torch.multinomial(noise, len(chunk) * negatives, replacement=True, generator=gen)
            loss = model.loss(chunk, neg.view(len(chunk), negatives))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(chunk)
        log(f"[vectors] epoch {epoch}/{epochs}: {len(pairs)} pairs, loss {total / max(len(pairs), 1):.4f}")
    vectors = model.inp.weight.detach()
    vectors = vectors / vectors.std()
    return {w: vectors[i].tolist() for i, w in enumerate(words)}


def write_vectors(vectors: dict[str, list[float]], path: str | Path) -> None:
    """word2vec text format, replacing ``path`` whole (``hlgt.files.replacing``: never a
    half-written file)."""
    dim = len(next(iter(vectors.values())))
    with replacing(path) as f:
        f.write(f"{len(vectors)} {dim}\n")
        for word, vec in vectors.items():
            f.write(word + " " + " ".join(f"{x:.5f}" for x in vec) + "\n")


if __name__ == "__main__":  # python -m hlgt.data.vectors: the command hlgt-vectors
    from hlgt.commands.vectors import run

    run()

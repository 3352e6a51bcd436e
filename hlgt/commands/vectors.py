"""hlgt-vectors (python -m hlgt.data.vectors): skip-gram word vectors trained on a shard folder's
own training texts (``hlgt.data.vectors``), written as a word2vec text file that
``--set train.word_vectors=FILE`` loads into the word embedding.

    hlgt-vectors --shards datasets/processed/math23k-offline --out vectors.txt [--dim 128]
"""
from __future__ import annotations

import argparse
import sys

from hlgt.commands.cli import run_command
from hlgt.data.vectors import corpus, train_vectors, write_vectors

PROG = "hlgt-vectors"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, allow_abbrev=False,
                                description="Train skip-gram word vectors on a shard folder's training texts.")
    p.add_argument("--shards", required=True, help="a shard folder written by hlgt.data.build")
    p.add_argument("--out", required=True, help="the word2vec text file to write")
    p.add_argument("--dim", type=int, default=128, help="vector size; must equal model.embedding_size")
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negatives", type=int, default=5)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--min-count", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    for name in ("dim", "window", "negatives", "epochs", "min_count"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.seed < 2 ** 63:
        p.error("--seed must be in [0, 2**63)")
    sentences = corpus(args.shards)
    vectors = train_vectors(sentences, dim=args.dim, window=args.window, negatives=args.negatives,
                            epochs=args.epochs, min_count=args.min_count, seed=args.seed)
    write_vectors(vectors, args.out)
    print(f"[vectors] {len(vectors)} words x {args.dim} from {len(sentences)} training problems -> {args.out}")
    return 0


def run() -> None:
    sys.exit(run_command(main, PROG))

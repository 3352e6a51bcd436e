"""Batches: shard rows → one padded, concatenated ``Batch``, the model's only input.

The graph of every problem is concatenated with node and edge offsets (PyG style), and the
ablation arm's graph variant is selected here, at batch time, from the superset stored in the
shards: the data is preprocessed once and every arm reads the same files. Tokens are stored as
strings and mapped to ids here, so one shard set serves any vocabulary.

Entry points: ``collate(rows, vocab, variant)`` for rows from ``hlgt.data.shards.load_rows``;
``iter_batches`` over in-memory rows, for the single-process loop and for each Ray Train worker's
shard alike. Rows collated again and again (training's, every epoch) are ``encode``d once first:
their words and gold prefixes looked up in the vocabulary and their lists made arrays, which is
most of what collating a raw row costs. All vectorised with numpy over the concatenated arrays:
no Python loop over nodes or edges.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from hlgt.data.graph import EDGE_TYPES, GRAPH_PARTS, GRAPH_VARIANTS, NODE_TYPES
from hlgt.data.vocab import NUM, Vocab
from hlgt.tensors import tensors_to


@dataclass
class Batch:
    """B problems, T = longest text, Q = most quantities, S = longest target."""

    ids: list[str]
    tokens: torch.Tensor  # [B, T] word ids, 0 = pad
    lengths: torch.Tensor  # [B]
    num_pos: torch.Tensor  # [B, Q] token index of quantity i (0 where padded)
    num_mask: torch.Tensor  # [B, Q] True for real quantities
    num_values: torch.Tensor  # [B, Q] values, the labels of the comparison task
    node_batch: torch.Tensor  # [Nn] problem index of each node (B: a padding node, ``padded``)
    node_pos: torch.Tensor  # [Nn] token index of each node within its problem
    node_type: torch.Tensor  # [Nn] NODE_TYPES id
    edge_index: torch.Tensor  # [2, E] (src, dst) batch-global node ids
    edge_type: torch.Tensor  # [E] EDGE_TYPES id
    line_index: torch.Tensor  # [2, L] (src edge, dst edge) batch-global edge ids
    target: torch.Tensor  # [B, S] gold prefix as decoder ids; 0-padded
    target_mask: torch.Tensor  # [B, S] True on real target tokens
    # check() passed: collate checks every batch it builds, on the CPU. Not an __init__ argument,
    # so a batch changed with dataclasses.replace is unchecked again; to() keeps it.
    checked: bool = dataclasses.field(default=False, init=False)

    def check(self) -> None:
        """``ValueError``, naming the field, when the lengths or the graph tensors are inconsistent.
        Each test reads a value back (a host synchronisation on a GPU): ``collate`` runs it once,
        on the CPU, and the model skips it for a checked batch."""
        B, T = self.tokens.shape
        if B == 0 or int(self.lengths.min()) < 1 or int(self.lengths.max()) > T:
            raise ValueError(f"lengths must lie in [1, {T}] for a non-empty batch, got {self.lengths.tolist()}")
        N, E, L = self.node_batch.numel(), self.edge_type.numel(), self.line_index.size(-1)
        shapes = {"node_pos": (self.node_pos.shape, (N,)), "node_type": (self.node_type.shape, (N,)),
                  "edge_index": (self.edge_index.shape, (2, E)), "line_index": (self.line_index.shape, (2, L))}
        for name, (got, want) in shapes.items():
            if tuple(got) != want:
                raise ValueError(f"batch.{name} has shape {tuple(got)}, expected {want}")
        ranges = [("node_batch", self.node_batch, B), ("node_type", self.node_type, len(NODE_TYPES)),
                  ("edge_index", self.edge_index, N), ("edge_type", self.edge_type, len(EDGE_TYPES)),
                  ("line_index", self.line_index, E)]
        for name, t, high in ranges:
            if t.numel() and (int(t.min()) < 0 or int(t.max()) >= high):
                raise ValueError(f"batch.{name} has values outside [0, {high})")
        if N and bool((self.node_pos < 0).any() | (self.node_pos >= self.lengths[self.node_batch]).any()):
            raise ValueError("batch.node_pos points outside its problem's tokens")
        if E and bool((self.node_batch[self.edge_index[0]] != self.node_batch[self.edge_index[1]]).any()):
            raise ValueError("batch.edge_index links nodes of different problems")
        if L and bool((self.edge_index[1, self.line_index[0]] != self.edge_index[0, self.line_index[1]]).any()):
            raise ValueError("batch.line_index has a line edge (i->j) => (k->l) with j != k")

    def padded(self, tokens: int, quantities: int, targets: int, nodes: int, edges: int, line_edges: int) -> "Batch":
        """This batch grown to fixed sizes (each at least this batch's), so that every batch padded
        alike has the same shapes: padding tokens and quantities are masked as a shorter problem's
        are; padding nodes belong to no problem (``node_batch`` B); padding edges join the last
        node, a padding one, to itself, and padding line edges the last edge, a padding one, to
        itself, so no message reaches a real node or edge. Padding target tokens are masked; the
        decoder's layout of the trees is padded apart (``TreeLayout.padded``). Checked and planned
        afterwards by ``Solver.plan``, not by ``check``, which allows no padding node."""
        B, T = self.tokens.shape
        N, E, L = self.node_batch.numel(), self.edge_type.numel(), self.line_index.size(1)
        have = {"tokens": (T, tokens), "quantities": (self.num_pos.size(1), quantities),
                "targets": (self.target.size(1), targets), "nodes": (N, nodes), "edges": (E, edges),
                "line_edges": (L, line_edges)}
        small = {k: v for k, v in have.items() if v[0] > v[1]}
        if small or (edges > E and nodes == N) or (line_edges > L and edges == E):
            raise ValueError(f"cannot pad a batch of sizes {({k: v[0] for k, v in have.items()})} to "
                             f"{({k: v[1] for k, v in have.items()})}: each size must be at least the batch's, "
                             "with a padding node for padding edges and a padding edge for padding line edges")

        def grow(x: torch.Tensor, size: int, fill) -> torch.Tensor:  # along the last dimension
            pad = x.new_full((*x.shape[:-1], size - x.size(-1)), fill)
            return torch.cat([x, pad], -1)

        padded = dataclasses.replace(
            self, tokens=grow(self.tokens, tokens, 0), num_pos=grow(self.num_pos, quantities, 0),
            num_mask=grow(self.num_mask, quantities, False), num_values=grow(self.num_values, quantities, 0.0),
            target=grow(self.target, targets, 0), target_mask=grow(self.target_mask, targets, False),
            node_batch=grow(self.node_batch, nodes, B), node_pos=grow(self.node_pos, nodes, 0),
            node_type=grow(self.node_type, nodes, 0), edge_index=grow(self.edge_index, edges, nodes - 1),
            edge_type=grow(self.edge_type, edges, 0), line_index=grow(self.line_index, line_edges, edges - 1))
        padded.checked = self.checked
        return padded

    def to(self, device: torch.device | str) -> "Batch":
        """The batch on ``device``, in one transfer per dtype (``tensors_to``)."""
        moved = tensors_to(self, device)
        moved.checked = self.checked
        return moved

    def __len__(self) -> int:
        return len(self.ids)


# The shard columns collate reads as they are, and their dtypes.
ARRAY_COLUMNS = {"num_pos": np.int64, "num_values": np.float64, "node_pos": np.int64, "node_type": np.int64,
                 "edge_src": np.int64, "edge_dst": np.int64, "edge_type": np.int64, "edge_part": np.int64,
                 "line_src": np.int64, "line_dst": np.int64}


@dataclass(frozen=True)
class Encoded:
    """A shard row as ``collate`` reads it, for one vocabulary: every list an array, the words and
    the gold prefix as the vocabulary's ids (``encode``)."""

    id: str
    words: np.ndarray  # [T] word ids, NUM at every quantity position
    target: np.ndarray  # [S] decoder ids of the gold prefix; empty when it is missing or unrepresentable
    arrays: dict[str, np.ndarray]  # ARRAY_COLUMNS, each one flat array


def encode(rows: Sequence[Mapping[str, Any]], vocab: Vocab) -> list[Encoded]:
    """Shard rows encoded for ``vocab`` (``Encoded``): collate them as the rows themselves, with
    that vocabulary, without looking anything up again."""
    num_id = vocab.word_id(NUM)
    out = []
    for r in rows:
        words = np.fromiter((vocab.word_id(str(t)) for t in r["tokens"]), dtype=np.int64, count=len(r["tokens"]))
        words[np.asarray(r["num_pos"], dtype=np.int64)] = num_id
        out.append(Encoded(id=str(r["id"]), words=words,
                           target=np.asarray(_target_ids(r["prefix"], vocab), dtype=np.int64),
                           arrays={c: np.asarray(r[c], dtype=t).reshape(-1) for c, t in ARRAY_COLUMNS.items()}))
    return out


def _variant_parts(variant: str) -> np.ndarray:
    if variant not in GRAPH_VARIANTS:
        raise ValueError(f"unknown graph variant {variant!r}; choose from {sorted(GRAPH_VARIANTS)}")
    return np.array([GRAPH_PARTS.index(p) for p in GRAPH_VARIANTS[variant]], dtype=np.int64)


def _concat(parts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows' arrays of one column (at least one), concatenated, and each row's length."""
    return np.concatenate(parts), np.array([len(p) for p in parts], dtype=np.int64)


def _pad(flat: np.ndarray, counts: np.ndarray, width: int, fill=0) -> np.ndarray:
    """Ragged rows (concatenated ``flat``, lengths ``counts``) → a [B, width] array, row-major."""
    out = np.full((len(counts), width), fill, dtype=flat.dtype)
    out[np.arange(width)[None, :] < counts[:, None]] = flat
    return out


def _offsets(counts: np.ndarray) -> np.ndarray:
    """Exclusive cumulative sum: where each row's items start in the concatenation."""
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _target_ids(prefix: Any, vocab: Vocab) -> list[int]:
    """Decoder ids of a gold prefix; empty when it is missing or holds a token the vocab lacks."""
    if prefix is None or len(prefix) == 0:
        return []
    ids = [vocab.output_id(str(t)) for t in prefix]
    return [] if any(i is None for i in ids) else ids


def trainable(row: Mapping[str, Any], vocab: Vocab) -> bool:
    """Whether the row's gold prefix is one the decoder can be trained towards with this vocab."""
    return bool(_target_ids(row["prefix"], vocab))


def collate(
    rows: Sequence[Mapping[str, Any]],
    vocab: Vocab,
    variant: str = "srl",
    max_quantities: int | None = None,
) -> Batch:
    """Shard rows (``hlgt.data.schema`` columns), or rows ``encode``d for ``vocab``, → one ``Batch``.

    ``variant`` keeps the edges of that graph variant's parts (``GRAPH_VARIANTS``); nodes are kept
    as they are and the line graph is restricted to the kept edges (exact for a non-backtracking
    line graph). ``max_quantities`` fixes Q (a row with more quantities raises); otherwise Q is the
    batch's largest count. A row without a representable gold prefix gets an all-False target mask
    (the evaluator scores it as wrong; training data never holds such rows). S is at least 1.
    """
    if len(rows) == 0:
        raise ValueError("collate needs at least one row")
    parts = _variant_parts(variant)
    rows = [r if isinstance(r, Encoded) else encode([r], vocab)[0] for r in rows]
    column = {c: _concat([r.arrays[c] for r in rows]) for c in ARRAY_COLUMNS}  # (flat, counts)
    words, lengths = _concat([r.words for r in rows])
    targets, t_counts = _concat([r.target for r in rows])
    s = max(int(t_counts.max()), 1)
    batch = Batch(
        ids=[r.id for r in rows],
        tokens=torch.from_numpy(_pad(words, lengths, max(int(lengths.max()), 1))),
        lengths=torch.from_numpy(lengths),
        **_quantities(column, max_quantities),
        **_graph(column, parts),
        target=torch.from_numpy(_pad(targets, t_counts, s)),
        target_mask=torch.from_numpy(np.arange(s)[None, :] < t_counts[:, None]),
    )
    batch.check()
    batch.checked = True
    return batch


def _quantities(column: dict, max_quantities: int | None) -> dict[str, torch.Tensor]:
    """The batch's quantity tensors [B, Q] from the concatenated columns."""
    (num_pos, q_counts), (num_values, _) = column["num_pos"], column["num_values"]
    q = int(q_counts.max()) if max_quantities is None else max_quantities
    if q_counts.max() > q:
        raise ValueError(f"a problem has {int(q_counts.max())} quantities, more than max_quantities={q}")
    return {"num_pos": torch.from_numpy(_pad(num_pos, q_counts, q)),
            "num_mask": torch.from_numpy(np.arange(q)[None, :] < q_counts[:, None]),
            "num_values": torch.from_numpy(_pad(num_values, q_counts, q).astype(np.float32))}


def _graph(column: dict, parts: np.ndarray) -> dict[str, torch.Tensor]:
    """The batch's graph tensors: every problem's graph concatenated with node offsets, then the
    variant's edges (``parts``) kept and renumbered, and the line edges between kept edges."""
    (node_pos, n_counts), (node_type, _) = column["node_pos"], column["node_type"]
    (edge_src, e_counts), (edge_dst, _) = column["edge_src"], column["edge_dst"]
    (edge_type, _), (edge_part, _) = column["edge_type"], column["edge_part"]
    (line_src, l_counts), (line_dst, _) = column["line_src"], column["line_dst"]
    node_shift = np.repeat(_offsets(n_counts), e_counts)  # [E] offset of each edge's problem
    edge_shift = np.repeat(_offsets(e_counts), l_counts)  # [L]
    edge_src, edge_dst = edge_src + node_shift, edge_dst + node_shift
    line_src, line_dst = line_src + edge_shift, line_dst + edge_shift
    keep = np.isin(edge_part, parts)  # [E]
    new_edge_id = np.cumsum(keep) - 1  # [E] id among the kept edges
    keep_line = keep[line_src] & keep[line_dst]  # [L]
    return {"node_batch": torch.from_numpy(np.repeat(np.arange(len(n_counts), dtype=np.int64), n_counts)),
            "node_pos": torch.from_numpy(node_pos), "node_type": torch.from_numpy(node_type),
            "edge_index": torch.from_numpy(np.stack([edge_src[keep], edge_dst[keep]])),
            "edge_type": torch.from_numpy(edge_type[keep]),
            "line_index": torch.from_numpy(np.stack([new_edge_id[line_src[keep_line]],
                                                     new_edge_id[line_dst[keep_line]]]))}


def iter_batches(
    rows: Sequence[Mapping[str, Any]],
    vocab: Vocab,
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
    variant: str = "srl",
    max_quantities: int | None = None,
) -> Iterator[Batch]:
    """Batches over in-memory rows (shuffled by ``seed`` when asked). The last may be short."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = np.random.default_rng(seed).permutation(len(rows)) if shuffle else np.arange(len(rows))
    for start in range(0, len(rows), batch_size):
        yield collate([rows[i] for i in order[start : start + batch_size]], vocab, variant, max_quantities)

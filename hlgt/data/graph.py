"""One problem (Example + Annotation) -> heterogeneous graph and its line graph.

Owns the node and edge rules of the paper (section 3.2, Table 1) and of the two Table 2 baselines,
all built at once into ONE superset graph whose edges are tagged with the part (GRAPH_PARTS) they
belong to; `select_variant` cuts out what an ablation arm uses.

Nodes (one per token position; a quantity is always its own node):
  * numeric: every Quantity; type by kind: "fraction" (fractions, mixed numbers), "percentage",
    "number" (integer, decimal, ratio part). numbers.py gives every ratio part its own token; should
    two quantities ever share a token, each is still its own node (same node_pos).
  * unit / rate: a UNIT or NOUN token immediately after a number token. It is a "rate" when the
    word expresses one (`is_rate_word`): it contains "/" or "每", starts with "per-", is in
    RATE_WORDS ("mph", "km/h", ...), or is itself followed by "per", "/" or "每"
    ("30 miles per hour", "5 元 / 千克"); otherwise a "unit".
  * root: the predicate token of every SRL frame.
  * entity: NOUN tokens inside SRL argument phrases.
  * words needed only by the parse graph (every token, when heads exist) or by the quantity-cell
    graph (cell words) that got no type above are typed "entity": the paper's 7 types have no
    "other word" type, and entity is its generic word type.
  Precedence when a token qualifies twice: number > unit/rate > root > entity.

Edges. Edge ids are sorted by (part, src, dst, type); duplicates (same part, src, dst, type) are
merged. "Both directions" means two directed edges with the same type.
  part "srl" (paper section 3.2, Table 1):
    * root <-> contact ARG0 / ARG1 / ARGM (both directions: Table 1 calls (r, e) symmetric). The
      contact node of an argument phrase is its last numeric node, else its last non-numeric
      node (entity, unit or rate). Phrase nodes are the numbers, units/rates and NOUN entities
      inside the span; a nested predicate is not one (it has its own frame), nor is a word that
      is a node only for the parse or quantity-cell part (so the SRL part never depends on them).
    * MOD from every other node of the phrase (entities, units, further numbers) to its contact.
    * MOD from each unit/rate node to the number it follows.
  part "compare" (numerical comparison, section 3.2, also the NC graph of Table 2; alone, the
    "nc" variant, beyond the paper's arms): for every ordered pair i != j of quantities, edge
    i -> j of type BAE (value_i >= value_j) or LES when both have the same numeric node type, DT
    when the types differ. Hence two directed edges per pair; equal values give BAE both ways.
  part "parse" (Table 2, Shen & Jin 2020): DEP in both directions for every dependency arc
    token <-> head. Empty when Annotation.heads is None (the backend has no parser).
  part "qcell" (Table 2, Graph2Tree quantity cells): QCELL in both directions between each
    quantity and its cell words: tokens at distance <= CELL_WINDOW (Graph2Tree's |i - j| < 4) with
    POS in CELL_POS (NOUN, VERB, ADJ, UNIT), not a quantity, and no PUNCT token in between (the
    cell stays inside the quantity's clause).
  part "qcompare" (Graph2Tree quantity comparison): one GT edge i -> j when value_i > value_j.

Line graph (eq. 1): one line node per directed edge (line node id = edge id) and a line edge
(i -> j) => (j -> k) whenever k != i (non-backtracking), across parts in the superset. The paper's
|V_L| = 2|E| counts an undirected edge twice; here every direction is already its own edge.

Variants keep every node (the contract): in a variant, nodes added for another part are isolated;
select_variant(..., prune_nodes=True) drops them (quantity nodes always stay).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hlgt.config import GRAPHS
from hlgt.data.numbers import NUM_KINDS, Example
from hlgt.data.srl import Annotation

NODE_TYPES = ("entity", "root", "unit", "rate", "fraction", "percentage", "number")
EDGE_TYPES = ("ARG0", "ARG1", "ARGM", "MOD", "BAE", "LES", "DT", "DEP", "QCELL", "GT")
GRAPH_PARTS = ("srl", "compare", "parse", "qcell", "qcompare")
GRAPH_VARIANTS = {"srl": ("srl", "compare"), "parse": ("parse", "compare"), "quantity_cell": ("qcell", "qcompare"),
                  "nc": ("compare",)}
assert tuple(GRAPH_VARIANTS) == GRAPHS, "every graph a config may name needs its parts"

NT = {name: i for i, name in enumerate(NODE_TYPES)}
ET = {name: i for i, name in enumerate(EDGE_TYPES)}
PT = {name: i for i, name in enumerate(GRAPH_PARTS)}
NUMERIC_NODE_TYPES = (NT["fraction"], NT["percentage"], NT["number"])
KIND_NODE_TYPE = {"integer": NT["number"], "decimal": NT["number"], "ratio": NT["number"],
                  "fraction": NT["fraction"], "percentage": NT["percentage"]}
assert set(KIND_NODE_TYPE) == set(NUM_KINDS), "every quantity kind needs a node type"

ROLES = {"ARG0": ET["ARG0"], "ARG1": ET["ARG1"], "ARGM": ET["ARGM"]}
UNIT_POS = frozenset({"UNIT", "NOUN"})
CELL_POS = frozenset({"NOUN", "VERB", "ADJ", "UNIT"})
CELL_WINDOW = 3
# Rate words that carry no "/" or "每" of their own (lower-cased comparison).
RATE_WORDS = frozenset({"mph", "kph", "kmph", "km/h", "m/s", "rpm", "bpm", "fps", "wpm", "mpg",
                        "元/千克", "元/kg", "千米/时", "米/秒", "千米/小时"})
RATE_FOLLOWERS = frozenset({"per", "/", "每"})

GRAPH_FIELDS = ("node_pos", "node_type", "edge_src", "edge_dst", "edge_type", "edge_part",
                "line_src", "line_dst")


# The most line edges one problem's graph may have (the longest Math23K problem has 7,156): a bound
# on the memory and time any input can take, with clean.MAX_TOKENS and clean.MAX_QUANTITIES.
MAX_LINE_EDGES = 100_000


class GraphError(ValueError):
    """An Example/Annotation pair that cannot be turned into a graph (the message says why)."""


@dataclass
class Graph:
    """Flat int64 arrays; node ids index node_*, edge ids index edge_* (and are the line-graph nodes)."""

    node_pos: np.ndarray   # [N] token index of each node
    node_type: np.ndarray  # [N] NODE_TYPES id
    edge_src: np.ndarray   # [E] node id
    edge_dst: np.ndarray   # [E] node id
    edge_type: np.ndarray  # [E] EDGE_TYPES id
    edge_part: np.ndarray  # [E] GRAPH_PARTS id
    line_src: np.ndarray   # [L] edge id: (edge i->j) -> (edge j->k), k != i
    line_dst: np.ndarray   # [L] edge id

    @property
    def num_nodes(self) -> int:
        return len(self.node_pos)

    @property
    def num_edges(self) -> int:
        return len(self.edge_src)

    @property
    def num_line_edges(self) -> int:
        return len(self.line_src)

    @classmethod
    def from_lists(cls, row: Mapping[str, Sequence[int]]) -> Graph:
        """Inverse of ``schema.graph_to_row``; copies (Arrow hands back read-only arrays)."""
        return cls(**{name: np.array(row[name], dtype=np.int64) for name in GRAPH_FIELDS})


def is_rate_word(word: str, next_word: str | None = None) -> bool:
    """True when `word` (the token after a number) names a rate rather than a plain unit."""
    w = word.lower()
    return ("/" in w or "每" in w or w.startswith("per-") or w in RATE_WORDS
            or (next_word is not None and next_word.lower() in RATE_FOLLOWERS))


def _check(example: Example, annotation: Annotation) -> None:
    n = len(example.tokens)
    if len(annotation.pos) != n:
        raise GraphError(f"annotation has {len(annotation.pos)} POS tags for {n} tokens")
    for q in example.quantities:
        if not 0 <= q.position < n:
            raise GraphError(f"quantity {q.text!r} at position {q.position} outside {n} tokens")
        if q.kind not in KIND_NODE_TYPE:
            raise GraphError(f"quantity {q.text!r} has unknown kind {q.kind!r}")
        if not np.isfinite(q.value):
            raise GraphError(f"quantity {q.text!r} has non-finite value {q.value}")
    for f in annotation.frames:
        if not 0 <= f.predicate < n:
            raise GraphError(f"predicate {f.predicate} outside {n} tokens")
        for role, start, end in f.args:
            if role not in ROLES:
                raise GraphError(f"unknown SRL role {role!r} (expected ARG0/ARG1/ARGM)")
            if not 0 <= start < end <= n:
                raise GraphError(f"argument span [{start}, {end}) invalid for {n} tokens")
    if annotation.heads is not None:
        if len(annotation.heads) != n:
            raise GraphError(f"annotation has {len(annotation.heads)} heads for {n} tokens")
        if any(not -1 <= h < n for h in annotation.heads):
            raise GraphError("dependency head outside the token range")


def _cell_words(qpos: int, pos: Sequence[str], quantity_positions: set[int]) -> list[int]:
    """Graph2Tree quantity cell of the quantity at `qpos`: see the module docstring."""
    cell = []
    for step in (-1, 1):
        t = qpos + step
        while 0 <= t < len(pos) and abs(t - qpos) <= CELL_WINDOW and pos[t] != "PUNCT":
            if pos[t] in CELL_POS and t not in quantity_positions:
                cell.append(t)
            t += step
    return sorted(cell)


def _pair_edges(qnode: np.ndarray, qtype: np.ndarray, value: np.ndarray):
    """compare and qcompare edges among quantities, built from all ordered pairs at once."""
    q = len(qnode)
    i, j = np.nonzero(~np.eye(q, dtype=bool))                     # [Q*(Q-1)] ordered pairs i != j
    same = qtype[i] == qtype[j]
    ctype = np.where(same, np.where(value[i] >= value[j], ET["BAE"], ET["LES"]), ET["DT"])
    gt = value[i] > value[j]
    src = np.concatenate([qnode[i], qnode[i][gt]])
    dst = np.concatenate([qnode[j], qnode[j][gt]])
    etype = np.concatenate([ctype, np.full(int(gt.sum()), ET["GT"])])
    part = np.concatenate([np.full(len(i), PT["compare"]), np.full(int(gt.sum()), PT["qcompare"])])
    return src, dst, etype, part


def build_graph(example: Example, annotation: Annotation) -> Graph:
    """The superset graph of one problem: every part of GRAPH_PARTS plus the line graph.

    Raises GraphError when the annotation does not fit the example. With annotation.heads None
    the "parse" part is empty and no node is added for it.
    """
    _check(example, annotation)
    quantities = example.quantities
    word_type, unit_of, cells = _word_types(example, annotation)
    node_pos, node_type, qnode, at = _nodes(quantities, word_type)
    edges = _EdgeList()
    _srl_edges(edges, annotation, node_pos, node_type, at, unit_of)
    if annotation.heads is not None:
        for t, h in enumerate(annotation.heads):
            if h >= 0 and h != t:
                for a in at[t]:
                    for b in at[h]:
                        edges.add(a, b, ET["DEP"], PT["parse"], both=True)
    for qi, q in enumerate(quantities):
        for t in cells[q.position]:
            edges.add(int(qnode[qi]), at[t][0], ET["QCELL"], PT["qcell"], both=True)
    value = np.array([q.value for q in quantities], dtype=np.float64)
    pairs = _pair_edges(qnode, node_type[qnode], value)
    edge_src, edge_dst, edge_type, edge_part = (np.concatenate([a, b]) for a, b in zip(edges.arrays(), pairs))

    # Merge duplicates and fix the edge order: one int64 key per edge, sorted by (part, src, dst, type).
    nn = max(len(node_pos), 1)
    key = ((edge_part * nn + edge_src) * nn + edge_dst) * len(EDGE_TYPES) + edge_type
    _, first = np.unique(key, return_index=True)
    edge_src, edge_dst, edge_type, edge_part = (a[first] for a in (edge_src, edge_dst, edge_type, edge_part))
    line_src, line_dst = line_graph(edge_src, edge_dst)
    return Graph(node_pos, node_type, edge_src, edge_dst, edge_type, edge_part, line_src, line_dst)


def _word_types(example: Example, annotation: Annotation):
    """The type of every non-quantity node (module docstring), filled in precedence order
    (setdefault keeps the first). -> (position -> node type, [(unit position, number position)],
    quantity position -> its cell words)"""
    tokens, pos, n = example.tokens, annotation.pos, len(example.tokens)
    quantity_positions = {q.position for q in example.quantities}
    word_type: dict[int, int] = {}
    unit_of: list[tuple[int, int]] = []
    for p in sorted(quantity_positions):
        w = p + 1
        if w < n and w not in quantity_positions and pos[w] in UNIT_POS:
            rate = is_rate_word(tokens[w], tokens[w + 1] if w + 1 < n else None)
            word_type[w] = NT["rate"] if rate else NT["unit"]
            unit_of.append((w, p))
    for f in annotation.frames:
        if f.predicate not in quantity_positions:
            word_type.setdefault(f.predicate, NT["root"])
    for f in annotation.frames:
        for _, start, end in f.args:
            for t in range(start, end):
                if pos[t] == "NOUN" and t not in quantity_positions:
                    word_type.setdefault(t, NT["entity"])
    if annotation.heads is not None:
        for t in range(n):
            if t not in quantity_positions:
                word_type.setdefault(t, NT["entity"])
    cells = {p: _cell_words(p, pos, quantity_positions) for p in quantity_positions}
    for cell in cells.values():
        for t in cell:
            word_type.setdefault(t, NT["entity"])
    return word_type, unit_of, cells


def _nodes(quantities, word_type: dict[int, int]):
    """Node arrays, ordered by position (quantities sharing a token keep their slot order).
    -> (node_pos [N], node_type [N], node id of each quantity [Q], position -> node ids there)"""
    words = sorted(word_type)
    node_pos = np.array([q.position for q in quantities] + words, dtype=np.int64)
    node_type = np.array([KIND_NODE_TYPE[q.kind] for q in quantities] + [word_type[w] for w in words],
                         dtype=np.int64)
    order = np.argsort(node_pos, kind="stable")
    node_pos, node_type = node_pos[order], node_type[order]
    node_id = np.empty(len(order), dtype=np.int64)
    node_id[order] = np.arange(len(order))
    at: dict[int, list[int]] = {}
    for v, p in enumerate(node_pos.tolist()):
        at.setdefault(p, []).append(v)
    return node_pos, node_type, node_id[: len(quantities)], at


class _EdgeList:
    """Directed edges in the order they are added."""

    def __init__(self):
        self.src: list[int] = []
        self.dst: list[int] = []
        self.type: list[int] = []
        self.part: list[int] = []

    def add(self, a: int, b: int, t: int, part: int, both: bool = False) -> None:
        for u, v in ((a, b), (b, a)) if both else ((a, b),):
            self.src.append(u)
            self.dst.append(v)
            self.type.append(t)
            self.part.append(part)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """(src, dst, type, part), int64 each."""
        return tuple(np.array(x, dtype=np.int64) for x in (self.src, self.dst, self.type, self.part))


def _srl_edges(edges: _EdgeList, annotation: Annotation, node_pos: np.ndarray, node_type: np.ndarray,
               at: dict[int, list[int]], unit_of: list[tuple[int, int]]) -> None:
    """The "srl" part (module docstring): root <-> contact of each argument phrase, MOD from the
    phrase's other nodes to its contact, MOD from each unit/rate to its number."""
    pos, srl = annotation.pos, PT["srl"]
    numeric = set(NUMERIC_NODE_TYPES)
    types = node_type.tolist()
    # SRL phrase nodes: numbers, units/rates, NOUN entities.
    phrase_node = [t in numeric or t in (NT["unit"], NT["rate"]) or (t == NT["entity"] and pos[p] == "NOUN")
                   for t, p in zip(types, node_pos.tolist())]
    for f in annotation.frames:
        for root in at[f.predicate]:
            for role, start, end in f.args:
                phrase = [v for t in range(start, end) for v in at.get(t, ()) if phrase_node[v]]
                if not phrase:
                    continue
                nums = [v for v in phrase if types[v] in numeric]
                contact = nums[-1] if nums else phrase[-1]
                edges.add(root, contact, ROLES[role], srl, both=True)
                for v in phrase:
                    if v != contact:
                        edges.add(v, contact, ET["MOD"], srl)
    for w, p in unit_of:
        for v in at[p]:
            edges.add(at[w][0], v, ET["MOD"], srl)

def line_graph(edge_src, edge_dst) -> tuple[np.ndarray, np.ndarray]:
    """Non-backtracking line graph (eq. 1): line edge e -> f for e = (i->j), f = (j->k), k != i.

    Vectorised: edges are grouped by source node (stable sort), and every edge e is paired with the
    whole out-edge group of its destination via repeat/arange, then backtracking pairs are masked.
    Output is sorted by e, then by f (ids ascending).
    """
    src = np.asarray(edge_src, dtype=np.int64)
    dst = np.asarray(edge_dst, dtype=np.int64)
    if src.ndim != 1 or src.shape != dst.shape:
        raise GraphError(f"edge_src {src.shape} and edge_dst {dst.shape} must be equal 1-D arrays")
    if len(src) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if min(src.min(), dst.min()) < 0:
        raise GraphError("negative node id in edge list")
    num_nodes = int(max(src.max(), dst.max())) + 1
    by_src = np.argsort(src, kind="stable")                       # [E] edge ids grouped by source node
    out_deg = np.bincount(src, minlength=num_nodes)                # [V]
    first_out = np.cumsum(out_deg) - out_deg                       # [V] start of node's group in by_src
    count = out_deg[dst]                                           # [E] successors of each edge
    if int(count.sum()) > MAX_LINE_EDGES:  # checked before the pairs are materialised
        raise GraphError(f"the line graph would have {int(count.sum())} edges; the limit is {MAX_LINE_EDGES}")
    line_src = np.repeat(np.arange(len(src)), count)               # [L0]
    offset = np.arange(len(line_src)) - np.repeat(np.cumsum(count) - count, count)   # [L0] rank in group
    line_dst = by_src[np.repeat(first_out[dst], count) + offset]   # [L0]
    keep = dst[line_dst] != src[line_src]                          # non-backtracking: k != i
    return line_src[keep], line_dst[keep]


def select_variant(graph: Graph, variant: str, prune_nodes: bool = False) -> Graph:
    """Keep the edges whose part belongs to GRAPH_VARIANTS[variant]; edge ids renumbered in order.

    Line edges between two kept edges are kept: whether e -> f is a line edge depends only on the
    endpoints of e and f, so the restriction equals line_graph() of the kept edges (same order, too).
    Nodes are kept as they are unless prune_nodes: then nodes with no kept edge are dropped, except
    numeric nodes (every quantity stays a node), and node ids are renumbered in order.
    """
    if variant not in GRAPH_VARIANTS:
        raise GraphError(f"unknown graph variant {variant!r}; expected one of {sorted(GRAPH_VARIANTS)}")
    part_ids = [PT[p] for p in GRAPH_VARIANTS[variant]]
    keep = np.isin(graph.edge_part, part_ids)                     # [E]
    new_edge = np.cumsum(keep) - 1                                 # [E] new id of each kept edge
    keep_line = keep[graph.line_src] & keep[graph.line_dst]        # [L]
    node_pos, node_type = graph.node_pos, graph.node_type
    edge_src, edge_dst = graph.edge_src[keep], graph.edge_dst[keep]
    if prune_nodes:
        used = np.isin(node_type, NUMERIC_NODE_TYPES)
        used[edge_src] = True
        used[edge_dst] = True
        new_node = np.cumsum(used) - 1
        node_pos, node_type = node_pos[used], node_type[used]
        edge_src, edge_dst = new_node[edge_src], new_node[edge_dst]
    return Graph(node_pos.copy(), node_type.copy(), edge_src, edge_dst,
                 graph.edge_type[keep], graph.edge_part[keep],
                 new_edge[graph.line_src[keep_line]], new_edge[graph.line_dst[keep_line]])


def graph_stats(graphs: Iterable[Graph]) -> dict[str, float]:
    """Average and maximum node, edge and line-edge counts per problem (for benchmarks, manifests)."""
    counts = np.array([(g.num_nodes, g.num_edges, g.num_line_edges) for g in graphs],
                      dtype=np.float64).reshape(-1, 3)                # [G, 3]
    stats = {"problems": float(len(counts))}
    for k, name in enumerate(("nodes", "edges", "line_edges")):
        stats[f"avg_{name}"] = float(counts[:, k].mean()) if len(counts) else 0.0
        stats[f"max_{name}"] = float(counts[:, k].max()) if len(counts) else 0.0
    return stats

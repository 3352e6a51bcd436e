"""Tests for hlgt/data/graph.py: node/edge rules (paper 3.2, Table 1, Table 2), line graph, variants."""

import time

import numpy as np
import pytest

from hlgt.data.graph import (
    EDGE_TYPES,
    GRAPH_PARTS,
    GRAPH_VARIANTS,
    NODE_TYPES,
    Graph,
    GraphError,
    build_graph,
    graph_stats,
    is_rate_word,
    line_graph,
    select_variant,
)
from hlgt.data.numbers import Example, Quantity
from hlgt.data.schema import graph_to_row
from hlgt.data.srl import Annotation, Frame


def make(tokens, quantities, pos, frames=(), heads=None):
    """Example + Annotation from a space-separated token string and (position, value, kind) triples."""
    toks = tokens.split()
    qs = [Quantity(text=toks[p], value=float(v), kind=k, position=p) for p, v, k in quantities]
    ex = Example(id="t", lang="zh", source="test", tokens=toks, quantities=qs, prefix=None, answer=0.0)
    ann = Annotation(pos=tuple(pos.split()), frames=tuple(Frame(p, tuple(a)) for p, a in frames),
                     heads=None if heads is None else tuple(heads))
    assert len(ann.pos) == len(toks)
    return ex, ann


def labels(g: Graph, ex) -> list[str]:
    """Node label: "N<i>" for quantity i, else the token position as a string."""
    qorder = iter(sorted(range(len(ex.quantities)), key=lambda i: ex.quantities[i].position))
    return [f"N{next(qorder)}" if NODE_TYPES[t] in ("fraction", "percentage", "number") else str(p)
            for p, t in zip(g.node_pos.tolist(), g.node_type.tolist())]


def nodes(g: Graph, ex) -> dict[str, str]:
    return dict(zip(labels(g, ex), (NODE_TYPES[t] for t in g.node_type.tolist())))


def edges(g: Graph, ex, part: str | None = None) -> set[tuple[str, str, str]]:
    lab = labels(g, ex)
    out = {(lab[s], lab[d], EDGE_TYPES[t])
           for s, d, t, p in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_type.tolist(), g.edge_part.tolist())
           if part is None or GRAPH_PARTS[p] == part}
    return out


def both(a, b, t):
    return {(a, b, t), (b, a, t)}


def brute_line_graph(src, dst):
    return sorted((e, f) for e in range(len(src)) for f in range(len(src)) if dst[e] == src[f] and dst[f] != src[e])


# The paper's Figure 1 problem, as it appears in Math23K (id 858's neighbour; equation
# x=30/(((7)/(3+7))-(2/5))), with a hand-made LTP-style annotation.
FIG1 = dict(
    tokens="运 一批 货物 ， 运走 的 与 剩下 的 比 为 3 ： 7 ， 如果 再 运走 30 吨 ， "
           "那么 剩下 的 货物 只 占 原有 货物 的 (2/5) ， 这 批 货物 原有 多少 吨 ？",
    quantities=[(11, 3, "ratio"), (13, 7, "ratio"), (18, 30, "integer"), (30, 0.4, "fraction")],
    pos="VERB OTHER NOUN PUNCT VERB OTHER ADP VERB OTHER NOUN VERB NUM PUNCT NUM PUNCT OTHER ADV VERB NUM UNIT "
        "PUNCT OTHER VERB OTHER NOUN ADV VERB ADJ NOUN OTHER NUM PUNCT PRON UNIT NOUN VERB OTHER UNIT PUNCT",
    frames=[(0, [("ARG1", 1, 3)]),
            (10, [("ARG0", 4, 10), ("ARG1", 11, 14)]),
            (17, [("ARGM", 15, 17), ("ARG1", 18, 20)]),
            (26, [("ARGM", 21, 22), ("ARG0", 22, 25), ("ARGM", 25, 26), ("ARG1", 27, 31)]),
            (35, [("ARG0", 32, 35), ("ARG1", 36, 38)])],
)


def test_figure1_nodes_and_edges():
    ex, ann = make(**FIG1)
    g = build_graph(ex, ann)
    assert nodes(g, ex) == {
        "0": "root", "2": "entity", "9": "entity", "10": "root", "N0": "number", "N1": "number",
        "17": "root", "N2": "number", "19": "unit", "24": "entity", "26": "root", "27": "entity",
        "28": "entity", "N3": "fraction", "34": "entity", "35": "root"}
    # "27" (原有, ADJ) is a node only because it is in the quantity cell of (2/5).
    srl = (both("0", "2", "ARG1") | both("10", "9", "ARG0") | both("10", "N1", "ARG1") | {("N0", "N1", "MOD")}
           | both("17", "N2", "ARG1") | {("19", "N2", "MOD")}
           | both("26", "24", "ARG0") | both("26", "N3", "ARG1") | {("28", "N3", "MOD")}
           | both("35", "34", "ARG0"))
    assert edges(g, ex, "srl") == srl and len(srl) == 17
    compare = ({("N1", "N0", "BAE"), ("N0", "N1", "LES"), ("N2", "N0", "BAE"), ("N0", "N2", "LES"),
                ("N2", "N1", "BAE"), ("N1", "N2", "LES")}
               | both("N3", "N0", "DT") | both("N3", "N1", "DT") | both("N3", "N2", "DT"))
    assert edges(g, ex, "compare") == compare
    assert edges(g, ex, "qcompare") == {("N1", "N0", "GT"), ("N2", "N0", "GT"), ("N2", "N1", "GT"),
                                        ("N0", "N3", "GT"), ("N1", "N3", "GT"), ("N2", "N3", "GT")}
    # N1 ("7") sits between "：" and "，": its clause-bounded cell is empty.
    assert edges(g, ex, "qcell") == (both("N0", "9", "QCELL") | both("N0", "10", "QCELL")
                                     | both("N2", "17", "QCELL") | both("N2", "19", "QCELL")
                                     | both("N3", "27", "QCELL") | both("N3", "28", "QCELL"))
    assert edges(g, ex, "parse") == set()
    assert (g.num_nodes, g.num_edges) == (16, 17 + 12 + 12 + 6)
    np.testing.assert_array_equal(np.bincount(g.edge_part, minlength=5), [17, 12, 0, 12, 6])
    # The intro's meta path "original goods -> (2/5) -> 30 -> 3:7" exists in the SRL variant.
    s = select_variant(g, "srl")
    lab = labels(s, ex)
    path = [("28", "N3"), ("N3", "N2"), ("N2", "N1")]
    assert all(any(lab[a] == x and lab[b] == y for a, b in zip(s.edge_src, s.edge_dst)) for x, y in path)


def small(heads=True):
    return make(
        tokens="小明 上午 吃 2 个 苹果 ， 下午 吃 3 个",
        quantities=[(3, 2, "integer"), (9, 3, "integer")],
        pos="NOUN NOUN VERB NUM UNIT NOUN PUNCT NOUN VERB NUM UNIT",
        frames=[(2, [("ARG0", 0, 1), ("ARGM", 1, 2), ("ARG1", 3, 6)]), (8, [("ARGM", 7, 8), ("ARG1", 9, 11)])],
        heads=[2, 2, -1, 4, 5, 2, 2, 8, 2, 10, 8] if heads else None)


def test_small_problem_with_parse():
    ex, ann = small()
    g = build_graph(ex, ann)
    assert nodes(g, ex) == {"0": "entity", "1": "entity", "2": "root", "N0": "number", "4": "unit", "5": "entity",
                            "6": "entity", "7": "entity", "8": "root", "N1": "number", "10": "unit"}
    assert edges(g, ex, "srl") == (both("2", "0", "ARG0") | both("2", "1", "ARGM") | both("2", "N0", "ARG1")
                                   | {("4", "N0", "MOD"), ("5", "N0", "MOD")} | both("8", "7", "ARGM")
                                   | both("8", "N1", "ARG1") | {("10", "N1", "MOD")})
    assert edges(g, ex, "compare") == {("N0", "N1", "LES"), ("N1", "N0", "BAE")}
    assert edges(g, ex, "qcompare") == {("N1", "N0", "GT")}
    arcs = [("0", "2"), ("1", "2"), ("N0", "4"), ("4", "5"), ("5", "2"), ("6", "2"), ("7", "8"), ("8", "2"),
            ("N1", "10"), ("10", "8")]
    assert edges(g, ex, "parse") == set().union(*(both(a, b, "DEP") for a, b in arcs))
    assert edges(g, ex, "qcell") == set().union(*(both("N0", w, "QCELL") for w in ("0", "1", "2", "4", "5")),
                                                *(both("N1", w, "QCELL") for w in ("7", "8", "10")))
    np.testing.assert_array_equal(np.bincount(g.edge_part, minlength=5), [13, 2, 20, 16, 1])
    counts = {v: (select_variant(g, v).num_edges, select_variant(g, v).num_line_edges) for v in GRAPH_VARIANTS}
    assert counts["srl"] == (15, 18)          # 18 line edges counted by hand from the out-degrees
    assert counts["parse"][0] == 22 and counts["quantity_cell"][0] == 17
    assert counts["nc"] == (2, 0)             # N0 -> N1 and back: a line edge never backtracks


def test_without_heads_parse_part_is_empty_and_nodes_shrink():
    ex, ann = small(heads=False)
    g = build_graph(ex, ann)
    assert "6" not in nodes(g, ex) and g.num_nodes == 10
    np.testing.assert_array_equal(np.bincount(g.edge_part, minlength=5), [13, 2, 0, 16, 1])
    # The SRL part does not depend on whether the parse added extra word nodes.
    with_heads = build_graph(*small(heads=True))
    assert edges(g, ex, "srl") == edges(with_heads, ex, "srl")


def test_comparison_types_from_values():
    ex, ann = make(tokens="a 5 b 5 c 2 d 50% e (1/2)",
                   quantities=[(1, 5, "integer"), (3, 5, "decimal"), (5, 2, "integer"), (7, 0.5, "percentage"),
                               (9, 0.5, "fraction")],
                   pos="OTHER NUM OTHER NUM OTHER NUM OTHER NUM OTHER NUM")
    g = build_graph(ex, ann)
    cmp = edges(g, ex, "compare")
    assert both("N0", "N1", "BAE") <= cmp                          # equal values: BAE both ways
    assert {("N0", "N2", "BAE"), ("N2", "N0", "LES"), ("N1", "N2", "BAE"), ("N2", "N1", "LES")} <= cmp
    assert both("N3", "N4", "DT") <= cmp                           # same value, different types
    assert len(cmp) == 5 * 4 and sum(t == "DT" for *_, t in cmp) == 20 - 6
    gt = edges(g, ex, "qcompare")
    assert ("N0", "N1", "GT") not in gt and ("N1", "N0", "GT") not in gt and ("N0", "N3", "GT") in gt
    assert len(gt) == 8                                            # 10 pairs minus the 2 ties, one direction each


def test_precedence_units_rates_and_contact():
    # "30 miles per hour": rate (followed by "per"); "5 kg": unit; "3 dollars" noun after a number: unit.
    ex, ann = make(tokens="drove 30 miles per hour for 5 kg of 3 dollars apples",
                   quantities=[(1, 30, "integer"), (6, 5, "integer"), (9, 3, "integer")],
                   pos="VERB NUM NOUN ADP NOUN ADP NUM UNIT ADP NUM NOUN NOUN",
                   frames=[(0, [("ARG1", 1, 5)]), (7, [("ARG1", 8, 12)]), (9, [])])
    g = build_graph(ex, ann)
    n = nodes(g, ex)
    assert n["2"] == "rate" and n["7"] == "unit" and n["10"] == "unit"      # unit beats root ("kg" is a predicate)
    assert n["N2"] == "number" and n["4"] == "entity" and n["11"] == "entity"  # number beats root
    srl = edges(g, ex, "srl")
    # phrase "30 miles per hour": the number is the contact, the others MOD to it
    assert both("0", "N0", "ARG1") | {("2", "N0", "MOD"), ("4", "N0", "MOD")} <= srl
    # phrase "of 3 dollars apples" of the predicate at a unit token
    assert both("7", "N2", "ARG1") | {("10", "N2", "MOD"), ("11", "N2", "MOD")} <= srl
    assert is_rate_word("km/h") and is_rate_word("每千克") and is_rate_word("mph") and is_rate_word("元", "/")
    assert not is_rate_word("persons") and not is_rate_word("percent") and not is_rate_word("吨", "，")


def test_contact_is_last_entity_without_numbers():
    ex, ann = make(tokens="the red apple tree grows", quantities=[], pos="OTHER ADJ NOUN NOUN VERB",
                   frames=[(4, [("ARG0", 0, 4)])])
    g = build_graph(ex, ann)
    assert edges(g, ex) == both("4", "3", "ARG0") | {("2", "3", "MOD")}


def test_empty_frames_and_no_quantities():
    ex, ann = make(tokens="今天 天气 很 好", quantities=[], pos="NOUN NOUN ADV ADJ")
    g = build_graph(ex, ann)
    assert (g.num_nodes, g.num_edges, g.num_line_edges) == (0, 0, 0)
    g = build_graph(*make(tokens="今天 天气 很 好", quantities=[], pos="NOUN NOUN ADV ADJ", heads=[1, 3, 3, -1]))
    assert g.num_nodes == 4 and g.num_edges == 6 and set(GRAPH_PARTS[p] for p in g.edge_part) == {"parse"}
    ex, ann = make(tokens="有 7 个", quantities=[(1, 7, "integer")], pos="VERB NUM UNIT")
    g = build_graph(ex, ann)                                      # one quantity, no frames: still a node
    assert nodes(g, ex) == {"0": "entity", "N0": "number", "2": "unit"}
    for v in GRAPH_VARIANTS:
        s = select_variant(g, v, prune_nodes=True)
        assert NODE_TYPES.index("number") in s.node_type.tolist()
    ex, ann = make(tokens="", quantities=[], pos="")
    assert build_graph(ex, ann).num_nodes == 0


def test_bad_annotation_raises_graph_error():
    ex, ann = small()
    with pytest.raises(GraphError, match="POS tags"):
        build_graph(ex, Annotation(pos=ann.pos[:-1], frames=ann.frames, heads=None))
    with pytest.raises(GraphError, match="span"):
        build_graph(ex, Annotation(pos=ann.pos, frames=(Frame(2, (("ARG1", 5, 40),)),), heads=None))
    with pytest.raises(GraphError, match="role"):
        build_graph(ex, Annotation(pos=ann.pos, frames=(Frame(2, (("ARG7", 0, 1),)),), heads=None))
    with pytest.raises(GraphError, match="heads"):
        build_graph(ex, Annotation(pos=ann.pos, frames=(), heads=(0,)))
    with pytest.raises(GraphError, match="unknown graph variant"):
        select_variant(build_graph(ex, ann), "amr")


def test_line_graph_by_hand():
    ls, ld = line_graph([0, 1, 1, 2], [1, 0, 2, 1])               # 0<->1<->2
    assert list(zip(ls.tolist(), ld.tolist())) == [(0, 2), (3, 1)]
    ls, ld = line_graph(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert len(ls) == len(ld) == 0
    with pytest.raises(GraphError):
        line_graph([0, 1], [1])


@pytest.mark.parametrize("seed", range(20))
def test_line_graph_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, e = int(rng.integers(1, 12)), int(rng.integers(0, 60))
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)      # parallel edges and self-loops included
    ls, ld = line_graph(src, dst)
    assert sorted(zip(ls.tolist(), ld.tolist())) == brute_line_graph(src.tolist(), dst.tolist())
    assert len(set(zip(ls.tolist(), ld.tolist()))) == len(ls)


def test_line_graph_of_built_graph_is_non_backtracking():
    ex, ann = make(**FIG1)
    g = build_graph(ex, ann)
    assert g.num_line_edges > 0
    # line-graph nodes are the directed edges: every line endpoint is an edge id < E
    assert g.line_src.max() < g.num_edges and g.line_dst.max() < g.num_edges
    assert np.all(g.edge_dst[g.line_src] == g.edge_src[g.line_dst])
    assert np.all(g.edge_dst[g.line_dst] != g.edge_src[g.line_src])
    assert sorted(zip(g.line_src.tolist(), g.line_dst.tolist())) == brute_line_graph(g.edge_src.tolist(),
                                                                                      g.edge_dst.tolist())


def random_superset(rng) -> Graph:
    n, e = int(rng.integers(2, 15)), int(rng.integers(1, 80))
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    ls, ld = line_graph(src, dst)
    return Graph(np.arange(n), rng.integers(0, len(NODE_TYPES), n), src, dst, rng.integers(0, len(EDGE_TYPES), e),
                 rng.integers(0, len(GRAPH_PARTS), e), ls, ld)


@pytest.mark.parametrize("variant", sorted(GRAPH_VARIANTS))
def test_select_variant_equals_line_graph_of_kept_edges(variant):
    rng = np.random.default_rng(1)
    built = [build_graph(*make(**FIG1)), build_graph(*small())]
    for g in built + [random_superset(rng) for _ in range(30)]:
        s = select_variant(g, variant)
        parts = {GRAPH_PARTS.index(p) for p in GRAPH_VARIANTS[variant]}
        keep = np.array([p in parts for p in g.edge_part.tolist()], dtype=bool)
        np.testing.assert_array_equal(s.edge_src, g.edge_src[keep])
        np.testing.assert_array_equal(s.edge_type, g.edge_type[keep])
        ls, ld = line_graph(s.edge_src, s.edge_dst)
        np.testing.assert_array_equal(s.line_src, ls)            # same line edges, in the same order
        np.testing.assert_array_equal(s.line_dst, ld)
        np.testing.assert_array_equal(s.node_pos, g.node_pos)
        p = select_variant(g, variant, prune_nodes=True)         # pruning renumbers nodes, same edges
        np.testing.assert_array_equal(p.node_pos[p.edge_src], g.node_pos[g.edge_src[keep]])
        np.testing.assert_array_equal(p.node_pos[p.edge_dst], g.node_pos[g.edge_dst[keep]])
        np.testing.assert_array_equal(p.line_src, s.line_src)


def test_row_round_trip_and_stats():
    g = build_graph(*make(**FIG1))
    back = Graph.from_lists(graph_to_row(g))
    for name in ("node_pos", "node_type", "edge_src", "edge_dst", "edge_type", "edge_part", "line_src", "line_dst"):
        np.testing.assert_array_equal(getattr(back, name), getattr(g, name))
        assert getattr(back, name).dtype == np.int64
    h = build_graph(*small())
    stats = graph_stats([g, h])
    assert stats["problems"] == 2 and stats["avg_nodes"] == (g.num_nodes + h.num_nodes) / 2
    assert stats["max_line_edges"] == max(g.num_line_edges, h.num_line_edges)
    assert graph_stats([])["avg_edges"] == 0.0


def test_build_speed():
    ex, ann = make(**FIG1)                                        # 39 tokens, 4 quantities, 5 frames
    ann = Annotation(pos=ann.pos, frames=ann.frames, heads=tuple([-1] + [0] * 38))
    build_graph(ex, ann)
    rates = []
    for _ in range(5):  # the best of five: a busy or stalled CPU slows a pass, not the code
        start, n = time.perf_counter(), 50
        for _ in range(n):
            build_graph(ex, ann)
        rates.append(n / (time.perf_counter() - start))
    assert max(rates) > 200, f"{max(rates):.0f} problems/s"      # target is > 1,000/s; lenient on a shared CPU


def test_the_largest_problem_within_the_limits_has_a_bounded_graph():
    # MAX_QUANTITIES quantities (every pair linked) and MAX_TOKENS tokens: the worst case of the
    # number-pair edges, under the line-graph limit, built in well under a second.
    import time
    import tracemalloc

    from hlgt.data.clean import MAX_QUANTITIES, MAX_TOKENS
    from hlgt.data.graph import MAX_LINE_EDGES
    from hlgt.data.numbers import extract_quantities
    from hlgt.data.srl import make_annotator

    words = " ".join(f"{i + 1} apples and" for i in range(MAX_QUANTITIES)).split()
    tokens, quantities = extract_quantities(words + ["pear"] * (MAX_TOKENS - len(words)))
    assert len(tokens) == MAX_TOKENS and len(quantities) == MAX_QUANTITIES
    example = Example(id="big", lang="en", source="t", tokens=tokens, quantities=quantities, prefix=None, answer=0.0)
    annotation = make_annotator("offline").annotate(tokens, "en")
    started = time.perf_counter()
    graph = build_graph(example, annotation)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    build_graph(example, annotation)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert MAX_QUANTITIES * (MAX_QUANTITIES - 1) <= graph.num_line_edges <= MAX_LINE_EDGES
    assert seconds < 2 and peak < 100e6


def test_a_line_graph_over_the_limit_is_refused_before_it_is_built():
    # A star: 600 edges into and 600 out of one node pair up into 360,000 line edges.
    from hlgt.data.graph import MAX_LINE_EDGES

    src = np.concatenate([np.arange(1, 601), np.zeros(600, dtype=np.int64)])
    dst = np.concatenate([np.zeros(600, dtype=np.int64), np.arange(601, 1201)])
    with pytest.raises(GraphError, match=f"360000 edges; the limit is {MAX_LINE_EDGES}"):
        line_graph(src, dst)

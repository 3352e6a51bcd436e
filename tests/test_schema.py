"""Tests for hlgt/data/schema.py: explicit Arrow schema, exact row round trip through Parquet."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hlgt.data.graph import Graph, build_graph, line_graph
from hlgt.data.numbers import Example, Quantity
from hlgt.data.schema import (
    SCHEMA,
    SCHEMA_VERSION,
    check_schema,
    from_row,
    graph_to_row,
    graphs_equal,
    rows_to_table,
    to_row,
)
from hlgt.data.srl import Annotation, Frame


def example(prefix=("+", "N0", "N1"), flag=None):
    tokens = ["小明", "有", "1,200", "元", "，", "花", "了", "(1/5)", "和", "20%", "比", "3:7", "。"]
    qs = [Quantity("1,200", 1200.0, "integer", 2), Quantity("(1/5)", 0.2, "fraction", 7),
          Quantity("20%", 0.2, "percentage", 9), Quantity("3", 3.0, "ratio", 11), Quantity("7", 7.0, "ratio", 11),
          Quantity("0.125", 0.125, "decimal", 3)]
    return Example(id="00017", lang="zh", source="sample/zh_train.json", tokens=tokens, quantities=qs,
                   prefix=None if prefix is None else list(prefix), answer=1 / 3, flag=flag)


def graph():
    src = np.array([0, 1, 1, 2, 3, 3], dtype=np.int64)
    dst = np.array([1, 0, 2, 3, 0, 1], dtype=np.int64)
    ls, ld = line_graph(src, dst)
    return Graph(node_pos=np.array([2, 1, 7, 9]), node_type=np.array([6, 1, 4, 5]), edge_src=src, edge_dst=dst,
                 edge_type=np.array([0, 0, 3, 4, 7, 9]), edge_part=np.array([0, 0, 0, 1, 2, 4]),
                 line_src=ls, line_dst=ld)


def test_schema_is_explicit_and_versioned():
    assert SCHEMA.metadata[b"hlgt.schema_version"] == str(SCHEMA_VERSION).encode()
    assert SCHEMA.field("id").type == pa.string()
    assert SCHEMA.field("tokens").type == pa.list_(pa.string())
    assert SCHEMA.field("num_values").type == pa.list_(pa.float64())
    assert SCHEMA.field("num_kinds").type == pa.list_(pa.int8())
    for name in ("num_pos", "node_pos", "node_type", "edge_src", "edge_dst", "edge_type", "edge_part",
                 "line_src", "line_dst"):
        assert SCHEMA.field(name).type == pa.list_(pa.int32()), name
    assert SCHEMA.field("prefix").nullable and not SCHEMA.field("id").nullable


@pytest.mark.parametrize("prefix,flag", [(("+", "N0", "*", "N1", "100"), None), (None, "value_mismatch")])
def test_row_round_trips_exactly_through_parquet(tmp_path, prefix, flag):
    ex, g = example(prefix, flag), graph()
    row = to_row(ex, g)
    assert row["text"] == " ".join(ex.tokens)
    pq.write_table(rows_to_table([row]), tmp_path / "x.parquet")
    table = pq.read_table(tmp_path / "x.parquet")
    check_schema(table.schema)
    assert table.schema.field("id").type == pa.string()  # "00017" stays a string
    back_ex, back_g = from_row(table.to_pylist()[0])
    assert back_ex == ex
    assert graphs_equal(back_g, g)
    assert all(getattr(back_g, n).dtype == np.int64 for n in ("node_pos", "edge_src", "line_dst"))


def test_round_trip_of_a_built_graph():
    ex = example()
    n = len(ex.tokens)
    ann = Annotation(pos=("NOUN", "VERB", "NUM", "UNIT", "PUNCT", "VERB", "OTHER", "NUM", "ADP", "NUM", "ADP",
                          "NUM", "PUNCT"),
                     frames=(Frame(1, (("ARG0", 0, 1), ("ARG1", 2, 4))), Frame(5, (("ARG1", 7, 12),))),
                     heads=tuple([-1] + [0] * (n - 1)))
    g = build_graph(ex, ann)
    back_ex, back_g = from_row(rows_to_table([to_row(ex, g)]).to_pylist()[0])
    assert back_ex == ex and graphs_equal(back_g, g)
    assert not graphs_equal(back_g, graph())


def test_graph_values_outside_int32_are_refused():
    g = graph()
    g.node_pos = np.array([2, 1, 7, 2**31])
    with pytest.raises(ValueError, match="node_pos"):
        graph_to_row(g)


def test_a_foreign_schema_is_refused():
    old = SCHEMA.with_metadata({"hlgt.schema_version": str(SCHEMA_VERSION - 1)})
    with pytest.raises(ValueError, match="rebuild"):
        check_schema(old)
    with pytest.raises(ValueError, match="rebuild"):
        check_schema(pa.schema([pa.field("id", pa.int64())], metadata=SCHEMA.metadata))

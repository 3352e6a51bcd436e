"""The shard schema: one Parquet row per problem, its text, quantities, gold equation and graph.

The Arrow schema is explicit and versioned (``SCHEMA_VERSION``, also stored in the schema's
metadata and in every manifest): readers never guess types, so string ids stay strings and an
old shard set is rebuilt, never misread, when the layout changes.

Tokens are stored as strings, not word ids: one shard set serves any vocabulary, and the collate
step maps them to ids. The graph is stored once as the superset (every part, each edge tagged
with ``edge_part``) in flat int32 lists; the collate step selects the ablation arm's variant.

``to_row`` / ``from_row`` are exact inverses (int64 graph arrays are narrowed to int32 on the
way in, which is lossless for any graph with fewer than 2**31 nodes, checked).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from hlgt.data.graph import GRAPH_FIELDS as GRAPH_COLUMNS
from hlgt.data.graph import Graph
from hlgt.data.numbers import NUM_KINDS, Example, Quantity

# Bump whenever a column is added, removed or changes meaning: the build's cache key includes it.
SCHEMA_VERSION = 1

_INT32_LIST = pa.list_(pa.int32())

EXAMPLE_FIELDS = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("lang", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),  # tokens joined by single spaces, for reading
    pa.field("tokens", pa.list_(pa.string()), nullable=False),
    pa.field("num_pos", _INT32_LIST, nullable=False),  # token index of quantity i (slot Ni)
    pa.field("num_values", pa.list_(pa.float64()), nullable=False),
    pa.field("num_kinds", pa.list_(pa.int8()), nullable=False),  # index into NUM_KINDS
    pa.field("num_texts", pa.list_(pa.string()), nullable=False),
    pa.field("prefix", pa.list_(pa.string()), nullable=True),  # null: equation not representable
    pa.field("answer", pa.float64(), nullable=False),
    pa.field("flag", pa.string(), nullable=True),  # why prefix is null (Example.flag)
]
GRAPH_ARROW_FIELDS = [pa.field(name, _INT32_LIST, nullable=False) for name in GRAPH_COLUMNS]

SCHEMA = pa.schema(EXAMPLE_FIELDS + GRAPH_ARROW_FIELDS, metadata={"hlgt.schema_version": str(SCHEMA_VERSION)})

_INT32_MAX = np.iinfo(np.int32).max


def example_to_row(example: Example) -> dict[str, Any]:
    """The example half of a row (no graph): what the annotation stage receives."""
    qs = example.quantities
    return {
        "id": str(example.id),
        "lang": example.lang,
        "source": example.source,
        "text": " ".join(example.tokens),
        "tokens": list(example.tokens),
        "num_pos": [q.position for q in qs],
        "num_values": [float(q.value) for q in qs],
        "num_kinds": [NUM_KINDS.index(q.kind) for q in qs],
        "num_texts": [q.text for q in qs],
        "prefix": None if example.prefix is None else list(example.prefix),
        "answer": float(example.answer),
        "flag": example.flag,
    }


def graph_to_row(graph: Graph) -> dict[str, Any]:
    """The graph half of a row: each array as a Python list of ints (int32 range checked)."""
    out = {}
    for name in GRAPH_COLUMNS:
        arr = np.asarray(getattr(graph, name))
        if arr.size and (arr.min() < 0 or arr.max() > _INT32_MAX):
            raise ValueError(f"graph column {name} has values outside [0, 2**31): {arr.min()}..{arr.max()}")
        out[name] = arr.astype(np.int64).tolist()
    return out


def to_row(example: Example, graph: Graph) -> dict[str, Any]:
    """One shard row: every column of ``SCHEMA``."""
    return {**example_to_row(example), **graph_to_row(graph)}


def example_from_row(row: Mapping[str, Any]) -> Example:
    """The ``Example`` a row was written from (its tokens, quantities, prefix and answer)."""
    tokens = [str(t) for t in row["tokens"]]
    quantities = [
        Quantity(text=str(text), value=float(value), kind=NUM_KINDS[int(kind)], position=int(pos))
        for text, value, kind, pos in zip(row["num_texts"], row["num_values"], row["num_kinds"], row["num_pos"])
    ]
    prefix = row["prefix"]
    return Example(
        id=str(row["id"]),
        lang=str(row["lang"]),
        source=str(row["source"]),
        tokens=tokens,
        quantities=quantities,
        prefix=None if prefix is None else [str(t) for t in prefix],
        answer=float(row["answer"]),
        flag=None if row["flag"] is None else str(row["flag"]),
    )


def graph_from_row(row: Mapping[str, Any]) -> Graph:
    """The ``Graph`` a row was written from, as int64 numpy arrays (the ``Graph`` contract)."""
    return Graph.from_lists(row)


def from_row(row: Mapping[str, Any]) -> tuple[Example, Graph]:
    """Inverse of ``to_row``."""
    return example_from_row(row), graph_from_row(row)


def graphs_equal(a: Graph, b: Graph) -> bool:
    """Array-wise equality of two graphs (``Graph`` holds numpy arrays, so ``==`` is not a bool)."""
    return all(np.array_equal(np.asarray(getattr(a, n)), np.asarray(getattr(b, n))) for n in GRAPH_COLUMNS)


def rows_to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    """Rows → an Arrow table with exactly ``SCHEMA`` (a row that does not fit raises here)."""
    return pa.Table.from_pylist([{f.name: r[f.name] for f in SCHEMA} for r in rows], schema=SCHEMA)


def check_schema(schema: pa.Schema, where: str = "shard") -> None:
    """Raise when a file's schema is not this code's ``SCHEMA`` (a stale or foreign shard)."""
    version = (schema.metadata or {}).get(b"hlgt.schema_version", b"?").decode()
    if version != str(SCHEMA_VERSION) or not schema.remove_metadata().equals(SCHEMA.remove_metadata()):
        raise ValueError(
            f"{where}: schema version {version} does not match this code's version {SCHEMA_VERSION} "
            f"(rebuild the shards with `python -m hlgt.data.build --force ...`)"
        )

"""Problems through the annotation step into rows: a split into Parquet shards, a problem file
into chunks of rows.

``AnnotateGraph`` annotates and graphs a batch of problems (``srl.make_annotator``, then
``build_graph``; the annotator is built and loaded once per actor). It runs in a Ray Data actor
pool (``run_ray``) or in this process over the same batches (``run_in_process``): both give the
same rows. ``consume`` takes a split's results in input order, counts the problems dropped (by
reason, with a few examples) and the graph sizes, and writes the kept rows as fixed-size shards.
``file_chunks`` does the same for a problem file a model is evaluated on, in bounded memory.

A problem the annotator cannot handle (``AnnotationError``), whose graph cannot be built
(``GraphError``) or that raises anything else is dropped under its reason: never fatal, never
silent. A model that cannot load (``AnnotatorLoadError``) is fatal.
"""
from __future__ import annotations

import itertools
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hlgt.data import srl
from hlgt.data.clean import clean_split
from hlgt.data.graph import GRAPH_PARTS, GRAPH_VARIANTS, GraphError, build_graph
from hlgt.data.numbers import Example
from hlgt.data.problems import ReadResult, iter_problems
from hlgt.data.schema import EXAMPLE_FIELDS, GRAPH_COLUMNS, SCHEMA, example_from_row, example_to_row, graph_to_row

# Ray is imported where it is used: a `--no-ray` build runs without it.

ROWS_PER_SHARD = 4096
SHARD_FILE = re.compile(r"part-\d{5}\.parquet")  # the only files a build writes in a split's folder
BATCH_SIZE = 64  # problems per map_batches call (and per Ray block)
ACTOR_RETRIES = 2  # restarts of an annotation actor that died, and retries of its batch
ANNOTATION_FAILED = "annotation_failed"  # AnnotationError: the backend cannot handle the problem
GRAPH_FAILED = "graph_failed"  # GraphError: the annotation does not fit the problem
UNEXPECTED_ERROR = "unexpected_error"  # any other exception raised by one problem
DROP_EXAMPLES = 20  # per split, (id, reason, message) kept in the manifest
FILE_CHUNK = 1024  # problems of a --data file prepared at a time (file_chunks)

# Between the annotation step and the writer: a row plus its input position and drop reason.
INPUT_SCHEMA = pa.schema([pa.field("index", pa.int64(), nullable=False)] + EXAMPLE_FIELDS)
PIPELINE_SCHEMA = pa.schema(
    [pa.field("index", pa.int64(), nullable=False)] + list(SCHEMA)
    + [pa.field("drop_reason", pa.string()), pa.field("drop_message", pa.string())]
)


# ---------------------------------------------------------------------------------------------
# The annotation step: one callable for the Ray actor pool and for the in-process path.


class AnnotateGraph:
    """``map_batches`` callable: pyarrow batch of ``INPUT_SCHEMA`` rows → ``PIPELINE_SCHEMA`` rows.

    The annotator is built and loaded once, here (a Ray actor keeps it for every batch it gets).
    """

    def __init__(self, annotator: str, model: str = ""):
        self.annotator = srl.make_annotator(annotator, model)
        load = getattr(self.annotator, "load", None)
        if load is not None:
            load()  # fail fast (AnnotatorLoadError) before any problem is counted

    def __call__(self, batch: pa.Table) -> pa.Table:
        empty_graph = {name: [] for name in GRAPH_COLUMNS}
        out = []
        for row in batch.to_pylist():
            example = example_from_row(row)
            reason = message = None
            try:
                graph = graph_to_row(build_graph(example, self.annotator.annotate(example.tokens, example.lang)))
            except srl.AnnotatorLoadError:
                raise
            except srl.AnnotationError as e:
                reason, message = ANNOTATION_FAILED, str(e)
            except GraphError as e:
                reason, message = GRAPH_FAILED, str(e)
            except Exception as e:  # one bad problem must not end a build of 200,000
                reason, message = UNEXPECTED_ERROR, f"{type(e).__name__}: {e}"
            if reason is not None:
                graph = empty_graph
            out.append({**row, **graph, "drop_reason": reason, "drop_message": message and message[:300]})
        return pa.Table.from_pylist(out, schema=PIPELINE_SCHEMA)


def input_table(examples: list[Example], start: int = 0) -> pa.Table:
    """Examples → the annotation step's input, with each row's position (order is checked later)."""
    return pa.Table.from_pylist([{"index": start + i, **example_to_row(ex)} for i, ex in enumerate(examples)],
                                schema=INPUT_SCHEMA)


def _batches(table: pa.Table, batch_size: int) -> list[pa.Table]:
    return [table.slice(i, batch_size) for i in range(0, table.num_rows, batch_size)]


def run_in_process(table: pa.Table, annotator: str, model: str = "", batch_size: int = BATCH_SIZE,
                   label: str = "") -> Iterator[pa.Table]:
    """The annotation step without Ray, over the same batches; prints progress every ~10%."""
    step = AnnotateGraph(annotator, model)
    start, total, done, next_report = time.perf_counter(), table.num_rows, 0, 0.1
    for batch in _batches(table, batch_size):
        result = step(batch)
        done += batch.num_rows
        if done >= next_report * total or done == total:
            rate = done / max(time.perf_counter() - start, 1e-9)
            print(f"[build] {label} {done}/{total} problems ({rate:.1f}/s)", flush=True)
            next_report = done / total + 0.1
        yield result


def run_ray(table: pa.Table, annotator: str, model: str = "", actors: int = 1,
            batch_size: int = BATCH_SIZE) -> Iterator[pa.Table]:
    """The annotation step in a Ray Data actor pool of ``actors`` (Ray must be initialised)."""
    import ray
    from ray.data import ActorPoolStrategy

    ds = ray.data.from_arrow(_batches(table, batch_size)).map_batches(
        AnnotateGraph,
        fn_constructor_kwargs={"annotator": annotator, "model": model},
        compute=ActorPoolStrategy(size=actors),
        batch_size=batch_size,
        batch_format="pyarrow",
        # An actor that dies on a batch (a crash in an annotator's native code, out of memory) is
        # restarted and the batch retried this often, not forever (Ray Data's default): a batch
        # that kills every actor given it would hang the build.
        max_restarts=ACTOR_RETRIES,
        max_task_retries=ACTOR_RETRIES,
    )
    # The writer needs input order: set on this dataset's own context, not the process's, which
    # every later dataset (a training run's in the same process) would copy.
    ds.context.execution_options.preserve_order = True
    done = 0
    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            done += batch.num_rows
            yield batch
    except ray.exceptions.RayActorError as error:
        # Ray's last line names the cause: an error in the actor's start (an annotator model that
        # cannot load), or its process's end (a native crash, out of memory).
        cause = ([line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__])[-1]
        raise ValueError(f"the annotation stopped, {done} problems annotated: an actor could not start or died "
                         f"{ACTOR_RETRIES + 1} times on a batch of at most {batch_size} problems ({cause}). A crash "
                         f"in an annotator's native code or out of memory: build with --no-ray to see it, or a "
                         f"smaller --batch-size to narrow it down") from error


# ---------------------------------------------------------------------------------------------
# Writing one split: order check, drop counts, graph statistics, fixed-size shards.


@dataclass
class SplitResult:
    rows: int = 0
    dropped: Counter = field(default_factory=Counter)
    drop_examples: list = field(default_factory=list)
    shards: list = field(default_factory=list)
    sums: Counter = field(default_factory=Counter)  # node / edge / line-edge totals (superset and variants)

    def graph_stats(self) -> dict[str, float]:
        n = max(self.rows, 1)
        return {k: round(v / n, 3) for k, v in sorted(self.sums.items())}


def _list_lengths(table: pa.Table, column: str) -> np.ndarray:
    return pc.list_value_length(table[column]).to_numpy(zero_copy_only=False).astype(np.int64)


def _flat(table: pa.Table, column: str) -> np.ndarray:
    return pc.list_flatten(table[column]).to_numpy(zero_copy_only=False).astype(np.int64)


def graph_sums(table: pa.Table) -> Counter:
    """Total nodes, edges and line edges of the rows: the superset and each ``GRAPH_VARIANTS`` arm."""
    e_counts, l_counts = _list_lengths(table, "edge_src"), _list_lengths(table, "line_src")
    edge_offset = np.repeat(np.cumsum(e_counts) - e_counts, l_counts)  # [L] first edge of the row
    line_src, line_dst = _flat(table, "line_src") + edge_offset, _flat(table, "line_dst") + edge_offset
    edge_part = _flat(table, "edge_part")
    sums = Counter(avg_nodes=int(_list_lengths(table, "node_pos").sum()), avg_edges=int(e_counts.sum()),
                   avg_line_edges=int(l_counts.sum()))
    for variant, parts in GRAPH_VARIANTS.items():
        keep = np.isin(edge_part, [GRAPH_PARTS.index(p) for p in parts])
        sums[f"{variant}/avg_edges"] += int(keep.sum())
        sums[f"{variant}/avg_line_edges"] += int((keep[line_src] & keep[line_dst]).sum())
    return sums


def consume(results: Iterable[pa.Table], expected: int, directory: Path | None = None,
            rows_per_shard: int = ROWS_PER_SHARD, first: int = 0) -> SplitResult:
    """Check order, count drops, sum graph sizes and (with ``directory``) write the kept rows.

    ``results`` must hold input rows ``first .. first + expected - 1`` in order.
    """
    out, pending, seen = SplitResult(), [], 0

    def flush(final: bool) -> None:
        table = pa.concat_tables(pending) if pending else SCHEMA.empty_table()
        pending.clear()
        while table.num_rows >= rows_per_shard or (final and table.num_rows):
            name = f"part-{len(out.shards):05d}.parquet"
            pq.write_table(table.slice(0, rows_per_shard).cast(SCHEMA), directory / name)
            out.shards.append(name)
            table = table.slice(rows_per_shard)
        if table.num_rows:
            pending.append(table)

    for batch in results:
        index = batch["index"].to_numpy()
        if not np.array_equal(index, np.arange(first + seen, first + seen + batch.num_rows)):
            raise RuntimeError(f"annotation results out of order at row {seen}: preserve_order was not kept")
        seen += batch.num_rows
        failed = batch.filter(pc.is_valid(batch["drop_reason"]))
        for reason, rid, message in zip(failed["drop_reason"].to_pylist(), failed["id"].to_pylist(),
                                        failed["drop_message"].to_pylist()):
            out.dropped[reason] += 1
            if len(out.drop_examples) < DROP_EXAMPLES:
                out.drop_examples.append({"id": rid, "reason": reason, "message": message})
        kept = batch.filter(pc.is_null(batch["drop_reason"])).select(SCHEMA.names)
        out.rows += kept.num_rows
        out.sums.update(graph_sums(kept))  # update keeps zero totals (+= would drop them)
        if directory is not None:
            pending.append(kept)
            if sum(t.num_rows for t in pending) >= rows_per_shard:
                flush(final=False)
    if seen != expected:
        raise RuntimeError(f"annotation returned {seen} rows for {expected} problems")
    if directory is not None:
        flush(final=True)
    return out


# ---------------------------------------------------------------------------------------------
# One problem file, for evaluating a model on data it was not trained on (no shard folder).


@dataclass
class FileCounts:
    """What became of a problem file's records, counted as they stream through ``file_chunks``."""
    read: ReadResult = field(default_factory=lambda: ReadResult(problems=[]))  # records, reader skips, notes
    dropped: Counter = field(default_factory=Counter)  # reason -> problems dropped by cleaning or annotation
    # reason -> scored problems whose gold equation the model cannot write
    unanswerable: Counter = field(default_factory=Counter)

    @property
    def not_scored(self) -> Counter:
        """Reason -> records that were not scored (reader, cleaning, annotation)."""
        return self.read.skipped + self.dropped


def file_chunks(path: str | Path, constants: list[str], annotator: str, model: str = "",
                counts: FileCounts | None = None, size: int = FILE_CHUNK,
                lang: str | None = None) -> Iterator[list[dict]]:
    """A problem file read, cleaned and annotated as a validation split is, as shard rows of the
    problems that can be scored, ``size`` problems at a time (a file of any size in bounded
    memory): the model's ``constants`` (a gold equation needing another is unanswerable, flagged
    ``rare_constant``), the annotator the model was trained with, loaded once, in this process;
    raw texts read in ``lang`` (the model's, as ``solve`` reads them; None: the file's majority).
    Every record is counted into ``counts``."""
    counts = counts if counts is not None else FileCounts()
    problems = iter_problems(path, counts.read, lang)
    step = AnnotateGraph(annotator, model)
    while chunk := list(itertools.islice(problems, size)):
        cleaned = clean_split(chunk, train=False, constants=constants,
                              on_drop=lambda p, reason, why: counts.read.note(f"{path}:{p.line}: {reason} ({why})"))
        counts.dropped.update(cleaned.dropped)
        if not cleaned.examples:
            continue
        table = pa.concat_tables([step(batch) for batch in _batches(input_table(cleaned.examples), BATCH_SIZE)])
        lines = {p.id: p.line for p in chunk}
        failed = table.filter(pc.is_valid(table["drop_reason"]))
        for pid, reason, why in zip(*(failed[c].to_pylist() for c in ("id", "drop_reason", "drop_message"))):
            counts.dropped[reason] += 1
            counts.read.note(f"{path}:{lines[pid]}: {reason} ({why})")
        rows = table.filter(pc.is_null(table["drop_reason"])).select(SCHEMA.names).to_pylist()
        counts.unanswerable.update(row["flag"] for row in rows if row["flag"] is not None)
        if rows:
            yield rows

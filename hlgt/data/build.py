"""Building shards: a dataset → Parquet shards + ``manifest.json``, annotated in a Ray Data actor pool.

    python -m hlgt.data.build --dataset math23k [--split valid] [--annotator offline|ltp|hanlp]
        [--annotator-model M] [--fold K] [--data-dir DIR] [--out DIR] [--actors N | --no-ray]
        [--address ADDR] [--force]
    python -m hlgt.data.build --bench --dataset ape210k --split valid --actors 1,2

One build covers a whole dataset (one MAWPS fold): every split is read and cleaned (constants
learned on train), the vocabulary is built on train, then each requested split goes through
``AnnotateGraph`` (annotate + build_graph per problem; the annotator is constructed and loaded once
per actor) and lands in ``<out>/<split>/part-NNNNN.parquet`` with the explicit schema of
``hlgt.data.schema``. With ``--actors N`` (default) the callable runs in an ``ActorPoolStrategy``
pool on a Ray started here (or on ``--address``); with ``--no-ray`` the same callable runs in this
process over the same batches, so both paths write identical shards (tested). Shards are written
by this driver process, in input order, not by Ray workers: on a cluster the output folder is on
the machine that asked for it.

A problem the annotator cannot handle (``AnnotationError``), whose graph cannot be built
(``GraphError``) or that raises anything else is counted in the manifest under its reason, with a
few examples: never fatal, never silent. A model that cannot load (``AnnotatorLoadError``) is fatal.

Caching: the manifest holds a key over the schema version, annotator name and version, source
file hashes, cleaning parameters and the code of the stages that shape a row. A re-run with the
same key reuses the shards ("reusing ..."); a different key rebuilds everything and says why;
``--force`` always rebuilds (a damaged manifest is named, and ``--force`` rebuilds it too). Splits
are reused or built one by one, and the manifest is written after each split, so an interrupted
build keeps its finished splits. A build writes only into a folder it made (its marker,
``hlgt.files``) and replaces only its manifest and shard files: a folder holding anything else is
refused, naming what.

Reading shards back is ``hlgt.data.shards``, which needs pyarrow only (no Ray, no annotator).
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hlgt.config import Config, DataConfig, is_uri
from hlgt.data import srl
from hlgt.data.clean import MAX_TOKENS, clean_split
from hlgt.data.graph import GRAPH_PARTS, GRAPH_VARIANTS, GraphError, build_graph
from hlgt.data.numbers import Example
from hlgt.data.problems import ReadResult
from hlgt.data.schema import (EXAMPLE_FIELDS, GRAPH_COLUMNS, SCHEMA, SCHEMA_VERSION, example_from_row, example_to_row,
                              graph_to_row)
from hlgt.data.shards import MANIFEST, load_manifest, split_faults
from hlgt.data.splits import MAWPS_FOLD_FILES, REPO_ROOT, SPLITS, read_split, resolve_data_dir, split_paths
from hlgt.ray_session import start_ray
from hlgt.data.vocab import Vocab, words_read
from hlgt.files import MARKER, claim, folder_kind, write_text

ROWS_PER_SHARD = 4096
SHARD_FILE = re.compile(r"part-\d{5}\.parquet")  # the only files a build writes in a split's folder
BATCH_SIZE = 64  # problems per map_batches call (and per Ray block)
ANNOTATION_FAILED = "annotation_failed"  # AnnotationError: the backend cannot handle the problem
GRAPH_FAILED = "graph_failed"  # GraphError: the annotation does not fit the problem
UNEXPECTED_ERROR = "unexpected_error"  # any other exception raised by one problem
DROP_EXAMPLES = 20  # per split, (id, reason, message) kept in the manifest
FILE_CHUNK = 1024  # problems of a --data file prepared at a time (file_chunks)
# Modules whose code decides what a row holds: any change to them rebuilds the shards.
ROW_CODE = ("hlgt/expr.py", "hlgt/data/problems.py", "hlgt/data/numbers.py", "hlgt/data/clean.py",
            "hlgt/data/splits.py", "hlgt/data/graph.py", "hlgt/data/vocab.py", "hlgt/data/schema.py",
            "hlgt/data/build.py")

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
    from ray.data import ActorPoolStrategy, DataContext

    DataContext.get_current().execution_options.preserve_order = True  # the writer needs input order
    ds = ray.data.from_arrow(_batches(table, batch_size)).map_batches(
        AnnotateGraph,
        fn_constructor_kwargs={"annotator": annotator, "model": model},
        compute=ActorPoolStrategy(size=actors),
        batch_size=batch_size,
        batch_format="pyarrow",
    )
    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        yield batch


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
# Inputs: read + clean every split, vocabulary, source hashes, cache key.


@dataclass
class Prepared:
    key: str
    key_parts: dict
    vocab: Vocab | None
    constants: list[str]
    examples: dict[str, list[Example]]  # split -> cleaned examples (requested splits only)
    counts: dict[str, dict]  # split -> read / cleaned counts
    notes: list[str]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _display(path: Path, data_dir: str) -> str:
    """A source's name without machine-specific prefixes (the key must not change with the checkout)."""
    for root in (resolve_data_dir(data_dir).resolve(), REPO_ROOT):
        if path.resolve().is_relative_to(root):
            return path.resolve().relative_to(root).as_posix()
    return path.name


def shards_path(cfg: Config) -> Path:
    """``<data.shards_dir>/<dataset>[-graph2tree][-novalid][-fold<k>]-<annotator>``."""
    d = cfg.data
    return Path(d.shards_dir) / f"{d.dataset}{fold_tag(d)}-{d.annotator}"


def fold_tag(d: DataConfig) -> str:
    """What names of shards and runs add for a MAWPS fold: the fold scheme unless it is the default,
    ``-novalid`` without held-out validation, the fold ("" for the other datasets)."""
    if d.dataset != "mawps":
        return ""
    scheme = "" if d.mawps_folds == "grouped" else f"-{d.mawps_folds}"
    return f"{scheme}{'' if d.mawps_valid else '-novalid'}-fold{d.fold}"


def prepare(cfg: Config, splits: Iterable[str] = SPLITS) -> Prepared:
    """Read and clean the dataset, learn constants and the vocabulary on train, compute the key.

    Train is read whenever its file exists (constants and vocabulary come from it). When it is
    missing and not requested (APE210K here has only its valid file), the requested splits are
    cleaned with no constants and the manifest holds no vocabulary: such shards serve pipeline
    work and benchmarks, not training. The gap is printed and noted in the manifest.
    """
    d = cfg.data
    splits = list(splits)
    notes: list[str] = []
    sources: dict[str, str] = {}
    for split in SPLITS:
        for path in split_paths(d.dataset, split, d.data_dir):
            if path.is_file():
                sources[_display(path, d.data_dir)] = _sha256(path)
    if d.dataset == "mawps":
        folds_file = MAWPS_FOLD_FILES[d.mawps_folds]
        sources[_display(folds_file, d.data_dir)] = _sha256(folds_file)
    code = hashlib.sha256(b"".join((REPO_ROOT / m).read_bytes() for m in ROW_CODE)).hexdigest()
    annotator = srl.make_annotator(d.annotator, d.annotator_model)  # models load lazily: cheap
    key_parts = {
        "schema_version": SCHEMA_VERSION,
        "dataset": d.dataset,
        "fold": d.fold if d.dataset == "mawps" else None,
        "mawps_folds": d.mawps_folds if d.dataset == "mawps" else None,
        "mawps_valid": d.mawps_valid if d.dataset == "mawps" else None,
        "annotator": {"name": annotator.name, "version": annotator.version, "option": d.annotator},
        "sources": sources,
        "params": {"min_const_freq": d.min_const_freq, "min_word_freq": d.min_word_freq, "max_tokens": MAX_TOKENS},
        "code": code,
    }
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True).encode()).hexdigest()[:16]

    counts: dict[str, dict] = {}
    examples: dict[str, list[Example]] = {}
    vocab, constants = None, []
    has_train = all(p.is_file() for p in split_paths(d.dataset, "train", d.data_dir))
    if has_train or "train" in splits:
        read = read_split(d.dataset, "train", d.data_dir, d.fold, d.mawps_folds, d.mawps_valid)
        train = clean_split(read.problems, train=True, min_const_freq=d.min_const_freq)
        constants = train.constants
        vocab = Vocab.build(map(words_read, train.examples), constants, d.min_word_freq)
        counts["train"] = _counts(read, train)
        examples["train"] = train.examples
    else:
        notes.append(f"{d.dataset} has no training file: no constants learned (equations that need one "
                     f"keep prefix=None, flag rare_constant) and no vocabulary")
    for split in (s for s in splits if s != "train"):
        read = read_split(d.dataset, split, d.data_dir, d.fold, d.mawps_folds, d.mawps_valid)
        cleaned = clean_split(read.problems, train=False, constants=constants)
        counts[split] = _counts(read, cleaned)
        examples[split] = cleaned.examples
    examples = {s: examples[s] for s in splits}
    return Prepared(key, key_parts, vocab, constants, examples, counts, notes)


def _counts(read, cleaned) -> dict:
    return {
        "records": read.records,
        "reader_skipped": dict(read.skipped),
        "problems": len(read.problems),
        "clean_dropped": dict(cleaned.dropped),
        "cleaned": len(cleaned.examples),
        "prefix_none": dict(cleaned.unrepresentable),
    }


# ---------------------------------------------------------------------------------------------
# The build: reuse or rebuild, split by split; Ray start and stop.


def _stale_reason(manifest: dict | None, prepared: Prepared) -> str:
    if manifest is None:
        return "no manifest"
    old = manifest.get("key_parts", {})
    changed = [k for k in prepared.key_parts if old.get(k) != prepared.key_parts[k]]
    if "sources" in changed:
        new, was = prepared.key_parts["sources"], old.get("sources", {})
        files = sorted(f for f in set(new) | set(was) if new.get(f) != was.get(f))
        changed[changed.index("sources")] = f"sources ({', '.join(files)})"
    return "changed: " + ", ".join(changed) if changed else "key differs"


def _split_folders(out: Path) -> list[Path]:
    return [out / name for s in SPLITS for name in (s, f"{s}.partial") if (out / name).exists()]


def _check_out_dir(out: Path) -> None:
    """Refuse a folder a build did not make (a mistyped --out, an earlier version's folder without
    the marker) or one holding anything a build does not write, naming it: a build replaces only
    its manifest and shard files."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file, not a shard folder: choose another --out")
    if not out.exists() or not any(out.iterdir()):
        return
    ours = {MARKER, MANIFEST, *SPLITS, *(f"{s}.partial" for s in SPLITS)}
    foreign = sorted(p.name for p in out.iterdir() if p.name not in ours and not _manifest_temp(p.name))
    foreign += sorted(f"{d.name}/{p.name}" for d in _split_folders(out) if d.is_dir() for p in d.iterdir()
                      if not (SHARD_FILE.fullmatch(p.name) and p.is_file()))
    foreign += [d.name for d in _split_folders(out) if not d.is_dir()]
    if folder_kind(str(out)) != "shards":
        raise FileExistsError(f"{out} is no shard folder of this version's builds (it has no {MARKER} file): choose "
                              f"another --out; if an earlier version built it, remove it by hand (rm -r {out}) and "
                              "build again")
    if foreign:
        raise FileExistsError(f"{out} holds files that are not shards ({', '.join(foreign[:5])}): a build replaces "
                              "only its manifest and shard files; move them, or choose another --out")


def _manifest_temp(name: str) -> bool:
    return name.startswith(f".{MANIFEST}.") and name.endswith(".partial")


def _remove_split(folder: Path) -> None:
    """Delete a split folder's shard files, then the folder (``_check_out_dir`` saw nothing else in it)."""
    if not folder.exists():
        return
    for shard in folder.iterdir():
        if not SHARD_FILE.fullmatch(shard.name):
            raise FileExistsError(f"{shard} is not a shard file: a build deletes nothing else")
        shard.unlink()
    folder.rmdir()


def _read_manifest(out: Path, force: bool) -> dict | None:
    """The folder's manifest; None when there is none, or when ``force`` rebuilds a damaged one."""
    try:
        return load_manifest(out) if (out / MANIFEST).exists() else None
    except ValueError:
        if force:
            return None
        raise


def _splits_to_build(out: Path, prepared: Prepared, splits: list[str], force: bool) -> tuple[dict | None, list[str]]:
    """Reuse or rebuild: the manifest to extend (None: start afresh, old splits cleared) and the
    splits still to build (none when every split is there under the same key)."""
    manifest = _read_manifest(out, force)
    if manifest is not None and manifest.get("key") == prepared.key and not force:
        faults = {s: split_faults(out, manifest, s) for s in splits if s in manifest["splits"]}
        todo = [s for s in splits if s not in manifest["splits"] or faults[s]]
        if not todo:
            print(f"[build] reusing {out} (key {prepared.key}, splits {', '.join(splits)})", flush=True)
        else:
            damage = "".join(f"; {f}" for fs in faults.values() for f in fs[:1])
            print(f"[build] {out}: same key, building missing or damaged split(s) {', '.join(todo)}{damage}", flush=True)
        return manifest, todo
    why = "--force" if force and (out / MANIFEST).exists() else _stale_reason(manifest, prepared)
    print(f"[build] building {out} ({why})", flush=True)
    for split in SPLITS:
        _remove_split(out / split)
    return None, splits


def build(cfg: Config, splits: Iterable[str] | None = None, out: str | Path | None = None, actors: int = 1,
          address: str | None = None, force: bool = False, batch_size: int = BATCH_SIZE) -> Path:
    """Build (or reuse) the shards of ``splits`` (default all); ``actors=0``: no Ray. Returns the folder."""
    splits = list(splits or SPLITS)
    bad = [s for s in splits if s not in SPLITS]
    if bad:
        raise ValueError(f"unknown split(s) {bad}; choose from {list(SPLITS)}")
    out = Path(out) if out is not None else shards_path(cfg)
    t0 = time.perf_counter()
    prepared = prepare(cfg, splits)
    for note in prepared.notes:
        print(f"[build] note: {note}", flush=True)
    with exclusive(out):  # a second command building the same folder waits, then reuses it
        _check_out_dir(out)
        manifest, todo = _splits_to_build(out, prepared, splits, force)
        if not todo:
            return out
        manifest = manifest or _new_manifest(cfg, prepared)
        claim(str(out), "shards")

        # One pipeline for all splits to build: actors start, and load their model, once.
        use_ray = actors > 0 or address is not None
        tables = [input_table(prepared.examples[s], start) for s, start in zip(todo, _starts(prepared, todo))]
        table = pa.concat_tables(tables)
        print(f"[build] {cfg.data.dataset} {'+'.join(todo)}: {table.num_rows} problems, annotator {cfg.data.annotator}, "
              f"{f'{max(actors, 1)} actor(s)' if use_ray else 'in-process'}", flush=True)
        started_ray = start_ray(address, console=False, dashboard=False, cpus=max(actors, os.cpu_count() or 1),
                                ship_package=True) if use_ray else False
        results: Iterator[pa.Table] = iter(())
        try:
            if table.num_rows and use_ray:
                results = run_ray(table, cfg.data.annotator, cfg.data.annotator_model, max(actors, 1), batch_size)
            elif table.num_rows:
                results = run_in_process(table, cfg.data.annotator, cfg.data.annotator_model, batch_size, cfg.data.dataset)
            start, done = time.perf_counter(), 0
            for split, part, split_table in zip(todo, _per_split(results, [t.num_rows for t in tables]), tables):
                partial = out / f"{split}.partial"
                _remove_split(partial)
                partial.mkdir()
                result = consume(part, split_table.num_rows, partial, first=done)
                _remove_split(out / split)
                partial.rename(out / split)
                manifest["splits"][split] = _split_entry(prepared.counts[split], result)
                seconds, done = time.perf_counter() - start, done + split_table.num_rows
                manifest["build"] = {
                    "seconds": round(time.perf_counter() - t0, 2),  # reading, cleaning, annotation, writing
                    "annotation_seconds": round(seconds, 2),  # includes actor start and model load
                    "problems_per_s": round(done / max(seconds, 1e-9), 2),
                    "actors": max(actors, 1) if use_ray else 0,
                    "address": address,
                    "splits_built": todo,
                }
                _write_manifest(out, manifest)
                s = manifest["splits"][split]
                print(f"[build] {cfg.data.dataset} {split}: {s['kept']} rows in {len(s['shards'])} shard(s), "
                      f"dropped {s['dropped'] or 0}", flush=True)
            print(f"[build] annotated {table.num_rows} problems in {manifest['build']['annotation_seconds']} s "
                  f"({manifest['build']['problems_per_s']} problems/s)", flush=True)
        finally:
            if hasattr(results, "close"):
                results.close()  # a Ray Data iterator reports its end to Ray: while Ray still runs
            if started_ray:
                import ray

                ray.shutdown()
    return out


@contextlib.contextmanager
def exclusive(out: Path, busy: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the lock of folder ``out`` (a lock file beside it): two commands writing the same
    folder at once (a shard folder's partial splits, a run's checkpoints) would mix their files.
    When another command holds it, ``busy()`` runs first (it may raise instead of waiting); by
    default a shard build says it waits."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if busy is None:
                print(f"[build] waiting for another command building {out}", flush=True)
            else:
                busy()
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def sole_writer(folder: str, busy_message: str) -> contextlib.AbstractContextManager:
    """The lock of ``folder`` while one command writes it (a run's or a sweep's): a second command
    is refused with ``OSError(busy_message)`` instead of mixing its files in. A folder given as a
    URI (s3://...) has no local lock: the cluster's users keep its names apart."""

    def refuse() -> None:
        raise OSError(busy_message)

    return contextlib.nullcontext() if is_uri(folder) else exclusive(Path(folder), busy=refuse)


def _starts(prepared: Prepared, splits: list[str]) -> list[int]:
    sizes = [len(prepared.examples[s]) for s in splits]
    return [sum(sizes[:i]) for i in range(len(sizes))]


def _per_split(results: Iterable[pa.Table], sizes: list[int]) -> Iterator[Iterator[pa.Table]]:
    """Cut one ordered result stream into consecutive streams of ``sizes`` rows (consume in order)."""
    it, carry = iter(results), []

    def part(remaining: int) -> Iterator[pa.Table]:
        while remaining > 0:
            batch = carry.pop() if carry else next(it)
            if batch.num_rows > remaining:
                carry.append(batch.slice(remaining))
                batch = batch.slice(0, remaining)
            remaining -= batch.num_rows
            yield batch

    for size in sizes:
        yield part(size)


def _new_manifest(cfg: Config, prepared: Prepared) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "key": prepared.key,
        "key_parts": prepared.key_parts,
        "dataset": cfg.data.dataset,
        "fold": prepared.key_parts["fold"],
        "mawps_folds": prepared.key_parts["mawps_folds"],
        "mawps_valid": prepared.key_parts["mawps_valid"],
        "annotator": prepared.key_parts["annotator"],
        "sources": prepared.key_parts["sources"],
        "constants": prepared.constants,
        "vocab": prepared.vocab.to_dict() if prepared.vocab is not None else None,
        "notes": prepared.notes,
        "splits": {},
    }


def _split_entry(counts: dict, result: SplitResult) -> dict:
    dropped = Counter(counts["reader_skipped"]) + Counter(counts["clean_dropped"]) + result.dropped
    return {
        **counts,
        "annotation_dropped": dict(result.dropped),
        "kept": result.rows,
        "dropped": dict(sorted(dropped.items())),
        "drop_examples": result.drop_examples,
        "shards": result.shards,
        "graph": result.graph_stats(),
    }


def _write_manifest(out: Path, manifest: dict) -> None:
    write_text(out / MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


def ensure_shards(cfg: Config, address: str | None = None, actors: int = 0) -> Path:
    """The shard folder of ``cfg`` for training: built when missing or stale, else reused.

    ``actors=0`` and no ``address`` annotate in this process (no Ray needed).
    """
    return build(cfg, out=shards_path(cfg), actors=actors, address=address)


# ---------------------------------------------------------------------------------------------
# One problem file, for evaluating a model on data it was not trained on (no shard folder).


@dataclass
class FileCounts:
    """What became of a problem file's records, counted as they stream through ``file_chunks``."""
    read: ReadResult = field(default_factory=lambda: ReadResult(problems=[]))  # records, reader skips, notes
    dropped: Counter = field(default_factory=Counter)  # reason -> problems dropped by cleaning or annotation
    unanswerable: Counter = field(default_factory=Counter)  # reason -> scored problems whose gold equation the model cannot write

    @property
    def not_scored(self) -> Counter:
        """Reason -> records that were not scored (reader, cleaning, annotation)."""
        return self.read.skipped + self.dropped


def file_chunks(path: str | Path, constants: list[str], annotator: str, model: str = "",
                counts: FileCounts | None = None, size: int = FILE_CHUNK) -> Iterator[list[dict]]:
    """A problem file read, cleaned and annotated as a validation split is, as shard rows of the
    problems that can be scored, ``size`` problems at a time (a file of any size in bounded
    memory): the model's ``constants`` (a gold equation needing another is unanswerable, flagged
    ``rare_constant``), the annotator the model was trained with, loaded once, in this process.
    Every record is counted into ``counts``."""
    from hlgt.data.problems import iter_problems

    counts = counts if counts is not None else FileCounts()
    problems = iter_problems(path, counts.read)
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


# ---------------------------------------------------------------------------------------------
# Benchmark: problems per second with 1, 2, ... actors in one Ray session.


def bench(cfg: Config, split: str, actor_counts: list[int], address: str | None = None,
          batch_size: int = BATCH_SIZE) -> dict:
    """Annotate + graph one split with each actor count (0 = in-process) in one Ray session; writes nothing.

    Two rates per count: over the whole run (actor start and model load included) and after the
    first batch arrived (the steady rate, which is what more actors should scale).
    """
    prepared = prepare(cfg, [split])
    table = input_table(prepared.examples[split])
    print(f"[bench] {cfg.data.dataset} {split}: {table.num_rows} problems, annotator {cfg.data.annotator}, "
          f"{os.cpu_count()} CPUs on this machine", flush=True)
    started_ray = (start_ray(address, console=False, dashboard=False, cpus=max(*actor_counts, os.cpu_count() or 1),
                             ship_package=True) if any(actor_counts) or address else False)
    runs: dict[int, dict[str, float]] = {}
    result = SplitResult()
    try:
        for n in actor_counts:
            start, first = time.perf_counter(), []
            if n == 0:
                results = run_in_process(table, cfg.data.annotator, cfg.data.annotator_model, batch_size, split)
            else:
                results = run_ray(table, cfg.data.annotator, cfg.data.annotator_model, n, batch_size)
            result = consume(_timed(results, first), table.num_rows)
            seconds = time.perf_counter() - start
            after_first = table.num_rows - first[0][1]
            runs[n] = {"seconds": round(seconds, 3), "problems_per_s": table.num_rows / seconds,
                       "steady_problems_per_s": after_first / max(seconds - (first[0][0] - start), 1e-9)}
            print(f"[bench] actors={n}: {table.num_rows} problems in {seconds:.2f} s = "
                  f"{runs[n]['problems_per_s']:.1f} problems/s overall, {runs[n]['steady_problems_per_s']:.1f} "
                  f"problems/s after the first batch (at {first[0][0] - start:.2f} s); "
                  f"dropped {dict(result.dropped) or 0}", flush=True)
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    stats = result.graph_stats()
    print(f"[bench] per problem: {stats['avg_nodes']} nodes, {stats['avg_edges']} edges, "
          f"{stats['avg_line_edges']} line-graph edges (superset); "
          + "; ".join(f"{v}: {stats[f'{v}/avg_edges']} edges, {stats[f'{v}/avg_line_edges']} line edges"
                      for v in GRAPH_VARIANTS), flush=True)
    base = actor_counts[0]
    ratios = {f"{n}/{base}": {k: round(runs[n][k] / runs[base][k], 3) for k in ("problems_per_s",
                                                                                 "steady_problems_per_s")}
              for n in actor_counts[1:]}
    for name, r in ratios.items():
        print(f"[bench] speed ratio actors {name}: {r['problems_per_s']:.2f}x overall, "
              f"{r['steady_problems_per_s']:.2f}x after the first batch", flush=True)
    return {"problems": table.num_rows, "runs": runs, "ratios": ratios, "graph": stats}


def _timed(results: Iterable[pa.Table], first: list) -> Iterator[pa.Table]:
    """Pass batches through, noting (time, rows) of the first one in ``first``."""
    for batch in results:
        if not first:
            first.append((time.perf_counter(), batch.num_rows))
        yield batch


# ---------------------------------------------------------------------------------------------
# Command line.


def _actor_list(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--actors takes an integer or a comma list, got {text!r}")
    if not counts or min(counts) < 0:
        raise argparse.ArgumentTypeError(f"--actors must be >= 0, got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    from hlgt.cli import non_negative_int, positive_int

    p = argparse.ArgumentParser(prog="python -m hlgt.data.build", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--dataset", default="sample",
                   help="sample | sample_zh | sample_en | math23k | mawps | ape210k (sample_zh, sample_en: one language)")
    p.add_argument("--split", action="append", choices=SPLITS, help="split(s) to build (repeatable; default all)")
    p.add_argument("--fold", type=non_negative_int, default=0, help="MAWPS fold (0..4)")
    p.add_argument("--mawps-folds", default="grouped", choices=list(MAWPS_FOLD_FILES),
                   help="MAWPS fold scheme (data.mawps_folds; see hlgt.data.splits)")
    p.add_argument("--no-mawps-valid", action="store_true",
                   help="MAWPS: no held-out validation, its problems train (data.mawps_valid=false)")
    p.add_argument("--data-dir", default=None, help="real datasets folder (default $HLGT_DATA_DIR or ../shared/datasets)")
    p.add_argument("--annotator", default="offline", help="offline | ltp | hanlp")
    p.add_argument("--annotator-model", default="", help="LTP / HanLP model id or local directory")
    p.add_argument("--min-const-freq", type=non_negative_int, default=None)
    p.add_argument("--min-word-freq", type=non_negative_int, default=None)
    p.add_argument("--shards-dir", default=None, help="parent of the default output folder (config data.shards_dir)")
    p.add_argument("--out", default=None, help="output folder (default <shards-dir>/<dataset>[-graph2tree][-novalid][-fold<k>]-<annotator>)")
    p.add_argument("--actors", type=_actor_list, default=[1],
                   help="annotation actors (default 1; 0 = in-process); with --bench a list such as 1,2")
    p.add_argument("--no-ray", action="store_true", help="annotate in this process (same as --actors 0)")
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: start a local Ray)")
    p.add_argument("--batch-size", type=positive_int, default=BATCH_SIZE, help="problems per annotation batch")
    p.add_argument("--force", action="store_true", help="rebuild even when the manifest matches")
    p.add_argument("--bench", action="store_true", help="measure problems/s for each --actors count; write nothing")
    args = p.parse_args(argv)

    flat: dict[str, Any] = {"data.dataset": args.dataset, "data.fold": args.fold, "data.mawps_folds": args.mawps_folds,
                            "data.mawps_valid": not args.no_mawps_valid, "data.annotator": args.annotator,
                            "data.annotator_model": args.annotator_model}
    for key, value in (("data.data_dir", args.data_dir), ("data.min_const_freq", args.min_const_freq),
                       ("data.min_word_freq", args.min_word_freq), ("data.shards_dir", args.shards_dir)):
        if value is not None:
            flat[key] = value
    cfg = Config.from_flat(flat)
    actors = [0] if args.no_ray else args.actors
    if args.bench:
        if args.split is None or len(args.split) != 1:
            p.error("--bench needs exactly one --split")
        bench(cfg, args.split[0], actors, args.address, args.batch_size)
        return 0
    if len(actors) != 1:
        p.error("--actors takes one number when building (a list only with --bench)")
    out = build(cfg, args.split, args.out, actors[0], args.address, args.force, args.batch_size)
    print(f"[build] done: {out / MANIFEST}")
    return 0


if __name__ == "__main__":
    from hlgt.cli import run_command

    sys.exit(run_command(main, "python -m hlgt.data.build"))

"""Building shards: a dataset → Parquet shards + ``manifest.json``, annotated in a Ray Data actor pool.

One build covers a whole dataset (one MAWPS fold): every split is read and cleaned (constants
learned on train), the vocabulary is built on train, then each requested split goes through the
annotation step (``hlgt.data.annotate``: annotate + build_graph per problem, in a Ray actor pool or
in this process, both writing identical shards) and lands in ``<out>/<split>/part-NNNNN.parquet``
with the explicit schema of ``hlgt.data.schema``. Ray is started here (or joined at ``address``)
when actors annotate. Shards are written by this driver process, in input order, not by Ray
workers: on a cluster the output folder is on the machine that asked for it. A problem the
annotation step drops is counted in the manifest under its reason, with a few examples.

Caching: the manifest holds a key over the schema version, annotator name and version, source
file hashes, cleaning parameters and the code of the stages that shape a row. A re-run with the
same key reuses the shards ("reusing ..."); a different key rebuilds everything and says why;
``--force`` always rebuilds (a damaged manifest is named, and ``--force`` rebuilds it too). Splits
are reused or built one by one, and the manifest is written after each split, so an interrupted
build keeps its finished splits. A build writes only into a folder it made (its marker,
``hlgt.storage``) and replaces only its manifest and shard files: a folder holding anything else is
refused, naming what. A build that would delete or replace shard files is refused while a command
reads the folder (a training, a sweep: ``hlgt.storage.reading``), since they read it lazily. A
folder at a URI (``s3://...``: a cluster's shared storage, where ``$HLGT_STORAGE`` puts the default
one) is built in a local temporary folder and copied up, the manifest last; it has no locks (its
users keep names apart, as for runs and sweeps there).

Reading shards back is ``hlgt.data.shards``, which needs pyarrow only (no Ray, no annotator).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa

from hlgt.config import Config, DataConfig
from hlgt.data import srl
from hlgt.data.annotate import BATCH_SIZE, SHARD_FILE, SplitResult, consume, input_table, run_in_process, run_ray
from hlgt.data.clean import MAX_TOKENS, clean_split
from hlgt.data.graph import GRAPH_VARIANTS
from hlgt.data.numbers import Example
from hlgt.data.schema import SCHEMA_VERSION
from hlgt.data.shards import MANIFEST, has_file, load_manifest, split_faults
from hlgt.data.splits import MAWPS_FOLD_FILES, REPO_ROOT, SPLITS, read_split, resolve_data_dir, split_paths
from hlgt.data.vocab import Vocab, words_read
from hlgt.ray_session import start_ray
from hlgt.storage import (
    MARKER,
    claim,
    copy_folder,
    exclusive,
    filesystem,
    folder_kind,
    is_uri,
    not_being_read,
    reading,
    write_text,
)

# Ray is imported where it is used: a `--no-ray` build runs without it.

# Modules whose code decides what a row holds: any change to them rebuilds the shards.
ROW_CODE = ("hlgt/expr.py", "hlgt/data/problems.py", "hlgt/data/text.py", "hlgt/data/numbers.py",
            "hlgt/data/clean.py", "hlgt/data/splits.py", "hlgt/data/srl/common.py", "hlgt/data/srl/offline.py",
            "hlgt/data/srl/models.py", "hlgt/data/graph.py", "hlgt/data/vocab.py", "hlgt/data/schema.py",
            "hlgt/data/annotate.py", "hlgt/data/build.py")
READER_NOTES = 3  # a split's notes on single records printed and kept in the manifest

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


def shards_path(cfg: Config) -> str | Path:
    """``<data.shards_dir>/<dataset>[-<fold scheme>][-novalid][-fold<k>]-<annotator>`` (``fold_tag``):
    a local path, or a URI where ``data.shards_dir`` is one (the cluster's shared storage)."""
    d = cfg.data
    name = f"{d.dataset}{fold_tag(d)}-{d.annotator}"
    return f"{d.shards_dir.rstrip('/')}/{name}" if is_uri(d.shards_dir) else Path(d.shards_dir) / name


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
        # The reader's first notes on single records (file and line of one skipped or renamed):
        # what to mend, beside the counts.
        "reader_notes": read.notes[:READER_NOTES],
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


def _read_manifest(out: str | Path, force: bool) -> dict | None:
    """The folder's manifest; None when there is none, or when ``force`` rebuilds a damaged one."""
    try:
        return load_manifest(out) if has_file(out, MANIFEST) else None
    except ValueError:
        if force:
            return None
        raise


def _splits_to_build(out: str | Path, prepared: Prepared, splits: list[str], force: bool
                     ) -> tuple[dict | None, list[str]]:
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
            print(f"[build] {out}: same key, building missing or damaged split(s) {', '.join(todo)}{damage}",
                  flush=True)
        return manifest, todo
    why = "--force" if force and has_file(out, MANIFEST) else _stale_reason(manifest, prepared)
    print(f"[build] building {out} ({why})", flush=True)
    return None, splits


def _replaces_files(out: Path, manifest: dict | None, todo: list[str]) -> bool:
    """Whether building ``todo`` deletes or replaces shard files a reader may hold: a rebuild
    (``manifest`` None) of a folder with splits, or a damaged split built again."""
    return any((out / s).exists() for s in (SPLITS if manifest is None else todo))


def _no_readers(out: Path) -> contextlib.AbstractContextManager:
    return not_being_read(out, f"{out} is being read by a running command (a training or a sweep) and this build "
                               "would replace its shards: let it finish, or build into another folder (hlgt-build "
                               "--out DIR; training and sweeps: --set data.shards_dir=DIR)")


def build(cfg: Config, splits: Iterable[str] | None = None, out: str | Path | None = None, actors: int = 1,
          address: str | None = None, force: bool = False, batch_size: int = BATCH_SIZE,
          held: contextlib.ExitStack | None = None) -> str | Path:
    """Build (or reuse) the shards of ``splits`` (default all); ``actors=0``: no Ray. Returns the
    folder; with ``held``, the folder's read hold (``hlgt.storage.reading``) is entered into it."""
    splits = list(splits or SPLITS)
    bad = [s for s in splits if s not in SPLITS]
    if bad:
        raise ValueError(f"unknown split(s) {bad}; choose from {list(SPLITS)}")
    out = out if out is not None else shards_path(cfg)
    t0 = time.perf_counter()
    prepared = prepare(cfg, splits)
    for note in prepared.notes + [f"{s}: {n}" for s, c in prepared.counts.items() for n in c["reader_notes"]]:
        print(f"[build] note: {note}", flush=True)
    if is_uri(out):
        return _build_at_uri(cfg, str(out).rstrip("/"), prepared, splits, actors, address, force, batch_size, t0)
    out = Path(out)
    with exclusive(out):  # a second command building the same folder waits, then reuses it
        _check_out_dir(out)
        manifest, todo = _splits_to_build(out, prepared, splits, force)
        if todo:
            with _no_readers(out) if _replaces_files(out, manifest, todo) else contextlib.nullcontext():
                _build_splits(cfg, out, prepared, manifest, todo, actors, address, batch_size, t0)
        if held is not None:  # taken before another build may start: it finds this reader
            held.enter_context(reading(out))
    return out


def _build_at_uri(cfg: Config, uri: str, prepared: Prepared, splits: list[str], actors: int, address: str | None,
                  force: bool, batch_size: int, t0: float) -> str:
    """Shards at a URI (a cluster's S3 storage): reused as a local folder is; else the splits to
    build are built in a local temporary folder, then each one's old shard files are removed (a
    rebuild: every split's, and the old manifest before them) and the new ones copied up, the
    manifest written last.
    A folder at a URI has no lock that says whether a training reads it, so shards of other
    settings there are replaced only with ``force``."""
    manifest, todo = _splits_to_build(uri, prepared, splits, force)
    if not todo:
        return uri
    if manifest is None and has_file(uri, MANIFEST) and not force:
        raise ValueError(f"{uri} holds shards of other settings, which a training or a sweep may be reading (a "
                         "folder at a URI has no lock to say): rebuild them with hlgt-build --force once none "
                         "does, or build into another folder (--out DIR; training and sweeps: --set "
                         "data.shards_dir=DIR)")
    claim(uri, "shards")  # a folder the project did not make is refused, nothing in it removed
    fs, base = filesystem(uri)
    found = {split: _not_shards_at(fs, f"{base}/{split}") for split in (SPLITS if manifest is None else todo)}
    foreign = [f"{split}/{name}" for split, names in found.items() for name in names or []]
    if foreign:  # checked for every split before anything is removed
        raise FileExistsError(f"{uri} holds files that are not shards ({', '.join(sorted(foreign)[:5])}): a build "
                              "replaces only its manifest and shard files")
    with tempfile.TemporaryDirectory(prefix="hlgt-shards-") as stage:
        local = Path(stage) / "shards"
        _build_splits(cfg, local, prepared, None, todo, actors, address, batch_size, t0)
        built = load_manifest(local)
        if manifest is not None:  # the same key: the splits not built again stay as they are
            built["splits"] = {**{s: e for s, e in manifest["splits"].items() if s not in todo}, **built["splits"]}
        # The old shards go only once the new ones are built: a failed or interrupted build leaves
        # them (and their manifest) as they were.
        if manifest is None and has_file(uri, MANIFEST):
            fs.delete_file(f"{base}/{MANIFEST}")
        for split, names in found.items():
            if names is not None:
                fs.delete_dir(f"{base}/{split}")
        for split in todo:
            copy_folder(local / split, f"{uri}/{split}")
        _write_manifest(uri, built)
    print(f"[build] copied to {uri}", flush=True)
    return uri


def _not_shards_at(fs, path: str) -> list[str] | None:
    """The names in a split folder at a URI that are not shard files; None when there is no folder."""
    import pyarrow.fs

    if fs.get_file_info(path).type == pyarrow.fs.FileType.NotFound:
        return None
    return [e.base_name for e in fs.get_file_info(pyarrow.fs.FileSelector(path))
            if not (e.type == pyarrow.fs.FileType.File and SHARD_FILE.fullmatch(e.base_name))]


def _build_splits(cfg: Config, out: Path, prepared: Prepared, manifest: dict | None, todo: list[str], actors: int,
                  address: str | None, batch_size: int, t0: float) -> None:
    """Annotate and write ``todo`` into ``out``, extending ``manifest`` (None: afresh, old splits cleared)."""
    if manifest is None:
        for split in SPLITS:
            _remove_split(out / split)
    manifest = manifest or _new_manifest(cfg, prepared)
    claim(str(out), "shards")

    # One pipeline for all splits to build: actors start, and load their model, once.
    use_ray = actors > 0 or address is not None
    tables = [input_table(prepared.examples[s], start) for s, start in zip(todo, _starts(prepared, todo))]
    table = pa.concat_tables(tables)
    print(f"[build] {cfg.data.dataset} {'+'.join(todo)}: {table.num_rows} problems, "
          f"annotator {cfg.data.annotator}, "
          f"{f'{max(actors, 1)} actor(s)' if use_ray else 'in-process'}", flush=True)
    started_ray = start_ray(address, console=False, dashboard=False, cpus=max(actors, os.cpu_count() or 1),
                            ship_package=True) if use_ray else False
    results: Iterator[pa.Table] = iter(())
    try:
        if table.num_rows:
            results = _annotation(cfg, table, max(actors, 1) if use_ray else 0, batch_size)
        start, done = time.perf_counter(), 0
        for split, part, split_table in zip(todo, _per_split(results, [t.num_rows for t in tables]), tables):
            result = _write_split(out, split, part, split_table.num_rows, first=done)
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


def _annotation(cfg: Config, table: pa.Table, actors: int, batch_size: int) -> Iterator[pa.Table]:
    """The annotation step's results in input order: ``actors`` Ray actors, or in this process (0)."""
    if actors:
        return run_ray(table, cfg.data.annotator, cfg.data.annotator_model, actors, batch_size)
    return run_in_process(table, cfg.data.annotator, cfg.data.annotator_model, batch_size, cfg.data.dataset)


def _write_split(out: Path, split: str, results: Iterable[pa.Table], rows: int, first: int) -> SplitResult:
    """One split's shards, written into ``<split>.partial`` and renamed over ``<split>`` when whole."""
    partial = out / f"{split}.partial"
    _remove_split(partial)
    partial.mkdir()
    result = consume(results, rows, partial, first=first)
    _remove_split(out / split)
    partial.rename(out / split)
    return result


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


def _write_manifest(out: str | Path, manifest: dict) -> None:
    write_text(f"{out}/{MANIFEST}", json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


def ensure_shards(cfg: Config, address: str | None = None, held: contextlib.ExitStack | None = None) -> Path:
    """The shard folder of ``cfg`` for training: built when missing or stale, else reused; held for
    reading in ``held`` (a training reads it until it ends). Annotated in this process (no Ray
    needed), or by one actor of the Ray cluster at ``address``.
    """
    return build(cfg, out=shards_path(cfg), actors=0, address=address, held=held)


# ---------------------------------------------------------------------------------------------
# Benchmark: problems per second with 1, 2, ... actors in one Ray session.


def _rate(value: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else format(value, spec) + unit


def bench(cfg: Config, split: str, actor_counts: list[int], address: str | None = None,
          batch_size: int = BATCH_SIZE) -> dict:
    """Annotate + graph one split with each actor count (0 = in-process) in one Ray session; writes nothing.

    Two rates per count: over the whole run (actor start and model load included) and after the
    first batch arrived (the steady rate, which is what more actors should scale).
    """
    prepared = prepare(cfg, [split])
    table = input_table(prepared.examples[split])
    if table.num_rows == 0:
        raise ValueError(f"{cfg.data.dataset} {split} holds no problems to time")
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
            # A split of one batch has no steady rate to measure.
            steady = after_first / max(seconds - (first[0][0] - start), 1e-9) if after_first else None
            runs[n] = {"seconds": seconds, "problems_per_s": table.num_rows / seconds,
                       "steady_problems_per_s": steady}
            print(f"[bench] actors={n}: {table.num_rows} problems in {seconds:.2f} s = "
                  f"{runs[n]['problems_per_s']:.1f} problems/s overall, "
                  f"{_rate(steady, '.1f')} problems/s after the first batch (at {first[0][0] - start:.2f} s); "
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
    ratios = {f"{n}/{base}": {k: runs[n][k] / runs[base][k] if runs[n][k] and runs[base][k] else None
                              for k in ("problems_per_s", "steady_problems_per_s")}
              for n in actor_counts[1:]}
    for name, r in ratios.items():
        print(f"[bench] speed ratio actors {name}: {_rate(r['problems_per_s'], '.2f', 'x')} overall, "
              f"{_rate(r['steady_problems_per_s'], '.2f', 'x')} after the first batch", flush=True)
    return {"problems": table.num_rows, "runs": runs, "ratios": ratios, "graph": stats}


def _timed(results: Iterable[pa.Table], first: list) -> Iterator[pa.Table]:
    """Pass batches through, noting (time, rows) of the first one in ``first``."""
    for batch in results:
        if not first:
            first.append((time.perf_counter(), batch.num_rows))
        yield batch


if __name__ == "__main__":  # python -m hlgt.data.build: the command hlgt-build
    from hlgt.commands.build import run

    run()

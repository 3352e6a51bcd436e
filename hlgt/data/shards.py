"""Reading a shard folder: its manifest, vocabulary and rows, and the check of a prebuilt folder
against a run's config. Needs pyarrow only: never Ray, never an annotator.

A shard folder, as ``hlgt.data.build`` writes it, holds ``manifest.json`` (counts, cache key,
vocabulary, and each split's shard files) and one folder per split of
``part-NNNNN.parquet`` files in the explicit schema of ``hlgt.data.schema``, checked on read.
The folder is a local path or a URI that pyarrow's filesystems take (``s3://...``: a cluster's
shared storage). A command that reads a local folder holds it for reading
(``hlgt.storage.reading``): a build that would replace its files is refused meanwhile.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pyarrow.parquet as pq

from hlgt.config import Config
from hlgt.data.schema import SCHEMA_VERSION, check_schema
from hlgt.data.vocab import Vocab
from hlgt.storage import filesystem, is_uri, reading

MANIFEST = "manifest.json"


def _located(shards_dir: str | Path, relative: str):
    """``(where, filesystem)`` of a file of the folder: a local path and None, or the path in the
    URI's pyarrow filesystem and that filesystem (pyarrow's readers take both)."""
    if not is_uri(shards_dir):
        return str(Path(shards_dir) / relative), None
    fs, base = filesystem(str(shards_dir))
    return f"{base}/{relative}", fs


def has_file(shards_dir: str | Path, relative: str) -> bool:
    """Whether the folder (a path or a URI) holds the file ``relative``."""
    where, fs = _located(shards_dir, relative)
    if fs is None:
        return Path(where).is_file()
    import pyarrow.fs

    return fs.get_file_info(where).type == pyarrow.fs.FileType.File


def _read_bytes(shards_dir: str | Path, relative: str) -> bytes:
    where, fs = _located(shards_dir, relative)
    if fs is None:
        return Path(where).read_bytes()
    with fs.open_input_stream(where) as f:
        return f.read()


def load_manifest(shards_dir: str | Path) -> dict:
    path = f"{str(shards_dir).rstrip('/')}/{MANIFEST}"
    if not has_file(shards_dir, MANIFEST):
        raise FileNotFoundError(f"no {MANIFEST} in {shards_dir}: build it with `python -m hlgt.data.build`")
    try:
        manifest = json.loads(_read_bytes(shards_dir, MANIFEST))
    except (ValueError, RecursionError) as e:
        fault = " ".join(str(e).split())[:200]
    else:
        fault = _structure_fault(manifest)
    if fault:
        raise ValueError(f"{path} is damaged ({fault}): rebuild the folder with "
                         "`python -m hlgt.data.build ... --force`")
    return manifest


def _structure_fault(manifest) -> str | None:
    """What a parsed manifest lacks of what the readers index into, or None."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
        return 'no "splits" object'
    for split, entry in manifest["splits"].items():
        shards = entry.get("shards") if isinstance(entry, dict) else None
        if not isinstance(shards, list) or not all(isinstance(name, str) for name in shards):
            return f'split {split!r} has no "shards" list of file names'
    annotator = manifest.get("annotator")
    if not isinstance(annotator, dict) or not isinstance(annotator.get("option"), str):
        return 'no "annotator" object with its "option"'
    return None


def load_vocab(shards_dir: str | Path) -> Vocab:
    manifest = load_manifest(shards_dir)
    if manifest.get("vocab") is None:
        raise ValueError(f"{shards_dir} has no vocabulary (its dataset had no training split)")
    return Vocab.from_dict(manifest["vocab"])


def load_rows(shards_dir: str | Path, split: str) -> list[dict]:
    """Every row of one split, in order, as plain Python values; read under the folder's read
    hold, so never half from a build that replaces them."""
    with reading(shards_dir):
        return _read_rows(shards_dir, split)


def _read_rows(shards_dir: str | Path, split: str) -> list[dict]:
    manifest = load_manifest(shards_dir)
    if split not in manifest["splits"]:
        raise KeyError(f"{shards_dir} has no {split!r} split (built: {sorted(manifest['splits'])})")
    rows: list[dict] = []
    for name in manifest["splits"][split]["shards"]:
        where, fs = _located(shards_dir, f"{split}/{name}")
        table = pq.read_table(where, filesystem=fs)
        check_schema(table.schema, f"{shards_dir}/{split}/{name}")
        rows += table.to_pylist()
    return rows


def split_faults(shards_dir: str | Path, manifest: dict, split: str) -> list[str]:
    """What is wrong with one built split's files, read from their Parquet footers only: a listed
    file missing, not readable as Parquet (truncated, corrupt), or rows other than the manifest's."""
    faults, rows = [], 0
    for name in manifest["splits"][split]["shards"]:
        if not has_file(shards_dir, f"{split}/{name}"):
            faults.append(f"{split}/{name} is missing")
            continue
        try:
            where, fs = _located(shards_dir, f"{split}/{name}")
            rows += pq.read_metadata(where, filesystem=fs).num_rows
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            faults.append(f"{split}/{name} is not a readable Parquet file ({e})")
    kept = manifest["splits"][split].get("kept")
    if not faults and kept is not None and rows != kept:
        faults.append(f"{split} has {rows} rows in its files, its manifest says {kept}")
    return faults


def use_shards(cfg: Config, shards_dir: str | Path, held: contextlib.ExitStack | None = None) -> str | Path:
    """A prebuilt shard folder (``--shards``), for machines without the raw data or the annotator;
    with ``held``, its read hold (``hlgt.storage.reading``) is entered into it first.

    Not checked against the raw files (they may be absent); checked against ``cfg``: same schema
    version, dataset, fold (and MAWPS fold scheme and validation) and annotator, every listed shard
    present, a vocabulary.
    """
    out = str(shards_dir).rstrip("/") if is_uri(shards_dir) else Path(shards_dir)
    if held is not None:
        held.enter_context(reading(out))
    manifest = load_manifest(out)
    d = cfg.data
    mawps = d.dataset == "mawps"
    wanted = {"schema_version": SCHEMA_VERSION, "dataset": d.dataset, "fold": d.fold if mawps else None,
              "mawps_folds": d.mawps_folds if mawps else None, "mawps_valid": d.mawps_valid if mawps else None}
    # Shards written before these keys existed hold the grouped folds, validation held out.
    before = {"mawps_folds": "grouped", "mawps_valid": True} if mawps else {}
    found = {k: manifest.get(k, before.get(k)) for k in wanted}
    if found != wanted:
        raise ValueError(f"{out} holds {found}, this run needs {wanted}: build the shards for this run with "
                         f"`python -m hlgt.data.build` or pass the matching --shards folder")
    if manifest["annotator"]["option"] != d.annotator:
        raise ValueError(f"{out} was annotated by {manifest['annotator']['option']!r}, this run asks for "
                         f"data.annotator={d.annotator!r}")
    faults = [f for split in manifest["splits"] for f in split_faults(out, manifest, split)]
    if faults:
        raise ValueError(f"{out} is damaged: {'; '.join(faults[:3])}{' ...' if len(faults) > 3 else ''}: "
                         f"rebuild it with `python -m hlgt.data.build`")
    load_vocab(out)
    print(f"[build] using prebuilt shards {out} (key {manifest['key']}; not checked against the raw data)", flush=True)
    return out

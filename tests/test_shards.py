"""Tests for hlgt/data/shards.py: reading a shard folder back, and checking a prebuilt one."""

import json
import shutil
import subprocess
import sys

import pytest

from hlgt.config import Config
from hlgt.data.build import build
from hlgt.data.shards import MANIFEST, use_shards

SAMPLE = Config.from_flat({"data.dataset": "sample"})


@pytest.fixture(scope="module")
def sample_shards(tmp_path_factory):
    return build(SAMPLE, out=tmp_path_factory.mktemp("sample") / "shards", actors=0)


def test_reading_shards_needs_neither_ray_nor_the_builder(sample_shards):
    code = ("import sys; from hlgt.data.shards import load_rows, load_vocab; from hlgt.data.collate import collate; "
            f"rows = load_rows({str(sample_shards)!r}, 'valid'); collate(rows, load_vocab({str(sample_shards)!r})); "
            "assert not any(m == 'ray' or m.startswith('ray.') for m in sys.modules), 'ray imported'; "
            "assert 'hlgt.data.build' not in sys.modules, 'the builder imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_prebuilt_shards_are_used_as_is_and_checked(sample_shards, tmp_path, monkeypatch):
    monkeypatch.setenv("HLGT_DATA_DIR", str(tmp_path / "no-raw-data-here"))
    assert use_shards(SAMPLE, sample_shards) == sample_shards
    with pytest.raises(ValueError, match="dataset"):
        use_shards(SAMPLE.override({"data.dataset": "math23k"}), sample_shards)
    with pytest.raises(ValueError, match="annotated by"):
        use_shards(SAMPLE.override({"data.annotator": "ltp"}), sample_shards)
    broken = tmp_path / "broken"
    shutil.copytree(sample_shards, broken)
    next((broken / "test").glob("*.parquet")).unlink()
    with pytest.raises(ValueError, match=r"broken is damaged: test/part-00000.parquet is missing: rebuild"):
        use_shards(SAMPLE, broken)
    # A truncated file: named, before Ray Data reads it (its own error names no file).
    shutil.rmtree(broken)
    shutil.copytree(sample_shards, broken)
    part = next((broken / "train").glob("*.parquet"))
    part.write_bytes(part.read_bytes()[:2000])
    with pytest.raises(ValueError, match=rf"train/{part.name} is not a readable Parquet file"):
        use_shards(SAMPLE, broken)
    with pytest.raises(FileNotFoundError, match="manifest"):
        use_shards(SAMPLE, tmp_path)
    # A manifest edited by hand: named as damaged, not a TypeError from deep inside.
    shutil.rmtree(broken)
    shutil.copytree(sample_shards, broken)
    manifest = json.loads((broken / MANIFEST).read_text())
    for edit, fault in ((lambda m: m.update(annotator="offline"), 'no "annotator" object'),
                        (lambda m: m["splits"]["train"].pop("shards"), "split 'train' has no \"shards\" list")):
        damaged = json.loads(json.dumps(manifest))
        edit(damaged)
        (broken / MANIFEST).write_text(json.dumps(damaged))
        with pytest.raises(ValueError, match=f"manifest.json is damaged \\({fault}"):
            use_shards(SAMPLE, broken)


def test_prebuilt_mawps_shards_must_have_the_run_fold_scheme_and_validation(sample_shards, tmp_path, monkeypatch):
    monkeypatch.setenv("HLGT_DATA_DIR", str(tmp_path / "no-raw-data-here"))
    mawps = Config.from_flat({"data.dataset": "mawps", "data.fold": 2})
    fake = tmp_path / "mawps-fold2"
    shutil.copytree(sample_shards, fake)
    manifest = json.loads((fake / MANIFEST).read_text())
    manifest.update(dataset="mawps", fold=2)
    manifest.pop("mawps_folds")  # written before fold schemes existed: the grouped folds, valid held out
    manifest.pop("mawps_valid")
    (fake / MANIFEST).write_text(json.dumps(manifest))
    assert use_shards(mawps, fake) == fake
    with pytest.raises(ValueError, match="mawps_folds"):
        use_shards(mawps.override({"data.mawps_folds": "graph2tree"}), fake)
    manifest["mawps_folds"] = "graph2tree"
    (fake / MANIFEST).write_text(json.dumps(manifest))
    assert use_shards(mawps.override({"data.mawps_folds": "graph2tree"}), fake) == fake
    with pytest.raises(ValueError, match="mawps_folds"):
        use_shards(mawps, fake)
    literature = mawps.override({"data.mawps_folds": "graph2tree", "data.mawps_valid": False})
    with pytest.raises(ValueError, match="mawps_valid"):
        use_shards(literature, fake)
    manifest["mawps_valid"] = False
    (fake / MANIFEST).write_text(json.dumps(manifest))
    assert use_shards(literature, fake) == fake


def test_a_damaged_split_is_rebuilt_when_the_folder_is_reused(sample_shards, tmp_path, capsys):
    folder = tmp_path / "shards"
    shutil.copytree(sample_shards, folder)
    part = next((folder / "valid").glob("*.parquet"))
    part.write_bytes(part.read_bytes()[:2000])
    build(SAMPLE, out=folder, actors=0)
    assert "building missing or damaged split(s) valid; valid/" in capsys.readouterr().out
    assert use_shards(SAMPLE, folder) == folder

"""Tests for hlgt/data/build.py: shards + manifest, reuse and rebuild, counted failures, the Ray path."""

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hlgt.config import Config, default_data_dir
from hlgt.data import srl
from hlgt.data.build import build, prepare, shards_path
from hlgt.data.graph import build_graph
from hlgt.data.schema import from_row, graphs_equal
from hlgt.data.shards import MANIFEST, load_manifest, load_rows, load_vocab
from hlgt.data.splits import SAMPLE_DIR, SPLITS
from hlgt.data.vocab import Vocab

SAMPLE = Config.from_flat({"data.dataset": "sample"})


@pytest.fixture(scope="module")
def sample_shards(tmp_path_factory):
    return build(SAMPLE, out=tmp_path_factory.mktemp("sample") / "shards", actors=0)


@pytest.fixture
def ape_like(tmp_path):
    """A data folder laid out like APE210K (JSON Lines), filled with the sample's Chinese problems."""
    (tmp_path / "ape210k").mkdir()
    for split in SPLITS:
        shutil.copy(SAMPLE_DIR / f"zh_{split}.json", tmp_path / "ape210k" / f"{split}.ape.json")
    return Config.from_flat({"data.dataset": "ape210k", "data.data_dir": str(tmp_path)})


class Wrapped:
    """An annotator that fails on chosen problems (by token text) and can claim another version."""

    def __init__(self, inner, fail=(), crash=(), version=None):
        self.inner, self.fail, self.crash = inner, fail, crash
        self.name, self.version = inner.name, version or inner.version

    def annotate(self, tokens, lang):
        text = "".join(tokens)
        if any(f in text for f in self.fail):
            raise srl.AnnotationError("test annotator cannot handle this problem")
        if any(c in text for c in self.crash):
            raise ZeroDivisionError("a backend bug")
        return self.inner.annotate(tokens, lang)


def wrap_annotator(monkeypatch, **kw):
    real = srl.make_annotator
    monkeypatch.setattr(srl, "make_annotator", lambda name, model="": Wrapped(real(name, model), **kw))


def test_manifest_counts_and_metadata(sample_shards):
    m = load_manifest(sample_shards)
    prepared = prepare(SAMPLE)
    assert m["schema_version"] == 1 and m["dataset"] == "sample"
    assert m["annotator"]["name"] == "offline-jieba-textblob-rules" and m["annotator"]["version"]
    assert set(m["sources"]) == {f"datasets/sample/{lang}_{s}.json" for lang in ("zh", "en") for s in SPLITS}
    assert all(len(h) == 64 for h in m["sources"].values())
    assert Vocab.from_dict(m["vocab"]) == load_vocab(sample_shards) == prepared.vocab
    assert m["build"]["actors"] == 0 and m["build"]["problems_per_s"] > 0
    for split in SPLITS:
        s = m["splits"][split]
        assert s["records"] == s["problems"] + sum(s["reader_skipped"].values())
        assert s["cleaned"] == s["problems"] - sum(s["clean_dropped"].values())
        assert s["kept"] == s["cleaned"] - sum(s["annotation_dropped"].values())
        assert s["kept"] == len(load_rows(sample_shards, split)) == len(prepared.examples[split]) > 0
        assert s["graph"]["avg_nodes"] > 0 and s["graph"]["srl/avg_edges"] <= s["graph"]["avg_edges"]
        assert all((sample_shards / split / name).is_file() for name in s["shards"])


def test_every_row_decodes_back_to_its_example_and_graph(sample_shards):
    prepared = prepare(SAMPLE)
    annotator = srl.make_annotator("offline")
    for split in SPLITS:
        rows = load_rows(sample_shards, split)
        assert [from_row(r)[0] for r in rows] == prepared.examples[split]  # same problems, same order
        for row in rows:
            example, graph = from_row(row)
            assert graphs_equal(graph, build_graph(example, annotator.annotate(example.tokens, example.lang)))


def test_second_run_reuses_the_shards(sample_shards, capsys):
    before = {p: p.stat().st_mtime_ns for p in sample_shards.rglob("*.parquet")}
    assert build(SAMPLE, out=sample_shards, actors=0) == sample_shards
    assert "reusing" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in sample_shards.rglob("*.parquet")} == before


def test_changed_source_or_annotator_rebuilds(ape_like, tmp_path, monkeypatch, capsys):
    out = tmp_path / "shards"
    build(ape_like, splits=["valid"], out=out, actors=0)
    key = load_manifest(out)["key"]
    build(ape_like, splits=["valid"], out=out, actors=0)
    assert "reusing" in capsys.readouterr().out

    valid = tmp_path / "ape210k" / "valid.ape.json"
    valid.write_text(valid.read_text(encoding="utf-8").replace("\n", "\n\n", 1), encoding="utf-8")
    build(ape_like, splits=["valid"], out=out, actors=0)
    assert "sources (ape210k/valid.ape.json)" in capsys.readouterr().out
    assert load_manifest(out)["key"] != key

    wrap_annotator(monkeypatch, version="2-test")
    build(ape_like, splits=["valid"], out=out, actors=0)
    assert "changed: annotator" in capsys.readouterr().out
    assert load_manifest(out)["annotator"]["version"] == "2-test"

    build(ape_like, splits=["test"], out=out, actors=0)  # same key: only the new split is built
    assert "building missing or damaged split(s) test" in capsys.readouterr().out
    assert set(load_manifest(out)["splits"]) == {"valid", "test"}

    build(ape_like, splits=["test"], out=out, actors=0, force=True)
    assert "--force" in capsys.readouterr().out


def test_the_code_that_makes_a_row_is_in_the_shards_key():
    # The annotators' adapters and rules and the raw-text tokeniser decide rows too: a change to
    # them must rebuild, not reuse shards made by the code before.
    from hlgt.data import build as b

    data = {str(path.relative_to(b.REPO_ROOT)) for path in (b.REPO_ROOT / "hlgt" / "data").rglob("*.py")}
    beside = {"hlgt/data/__init__.py", "hlgt/data/srl/__init__.py", "hlgt/data/collate.py", "hlgt/data/shards.py",
              "hlgt/data/report.py", "hlgt/data/vectors.py"}  # read rows, or report, or are re-exports
    assert data - beside <= set(b.ROW_CODE) and all((b.REPO_ROOT / m).is_file() for m in b.ROW_CODE)


def test_problems_the_annotator_cannot_handle_are_counted(ape_like, tmp_path, monkeypatch):
    rows = [json.loads(line) for line in (SAMPLE_DIR / "zh_train.json").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    bad, buggy = rows[3], rows[5]
    wrap_annotator(monkeypatch, fail=["".join(bad["segmented_text"].split())],
                   crash=["".join(buggy["segmented_text"].split())])
    out = build(ape_like, splits=["train"], out=tmp_path / "shards", actors=0)
    s = load_manifest(out)["splits"]["train"]
    assert s["annotation_dropped"] == {"annotation_failed": 1, "unexpected_error": 1}
    assert s["dropped"]["annotation_failed"] == 1
    assert s["kept"] == s["cleaned"] - 2 == len(load_rows(out, "train"))
    assert {(e["id"], e["reason"]) for e in s["drop_examples"]} == {
        (str(bad["id"]), "annotation_failed"), (str(buggy["id"]), "unexpected_error")}
    assert "ZeroDivisionError" in next(e["message"] for e in s["drop_examples"] if e["reason"] == "unexpected_error")
    assert str(bad["id"]) not in {r["id"] for r in load_rows(out, "train")}


def test_missing_training_file_builds_without_vocab(ape_like, tmp_path, capsys):
    (tmp_path / "ape210k" / "train.ape.json").unlink()
    out = build(ape_like, splits=["valid"], out=tmp_path / "shards", actors=0)
    assert "no training file" in capsys.readouterr().out
    m = load_manifest(out)
    assert m["vocab"] is None and m["constants"] == [] and m["notes"]
    with pytest.raises(ValueError, match="no vocabulary"):
        load_vocab(out)
    with pytest.raises(FileNotFoundError, match="train"):
        build(ape_like, splits=["train"], out=tmp_path / "shards2", actors=0)


def test_a_skipped_record_is_named_by_file_and_line_beside_the_counts(ape_like, tmp_path, capsys):
    valid = tmp_path / "ape210k" / "valid.ape.json"
    lines = valid.read_text(encoding="utf-8").splitlines()
    valid.write_text("\n".join([lines[0], '{"id": "cut", "segmented_text": "a', *lines[1:]]) + "\n", encoding="utf-8")
    out = build(ape_like, splits=["valid"], out=tmp_path / "shards", actors=0)
    said = f"valid: {valid}:2: malformed_json ("
    assert f"[build] note: {said}" in capsys.readouterr().out
    assert load_manifest(out)["splits"]["valid"]["reader_notes"][0].startswith(said.removeprefix("valid: "))


def test_refuses_to_clear_a_foreign_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=rf"{tmp_path} is no shard folder of this version's builds .*rm -r"):
        build(SAMPLE, out=tmp_path, actors=0)
    assert (tmp_path / "notes.txt").exists()


def test_a_build_replaces_only_its_manifest_and_shard_files(tmp_path):
    out = build(SAMPLE, splits=["valid"], out=tmp_path / "shards", actors=0)
    (out / "train").mkdir()  # the user's own folder, named like a split
    (out / "train" / "mine.txt").write_text("mine")
    (out / "valid" / "notes.txt").write_text("mine too")
    with pytest.raises(FileExistsError, match=r"holds files that are not shards \(train/mine.txt, valid/notes.txt\)"):
        build(SAMPLE, splits=["valid"], out=out, actors=0, force=True)
    assert (out / "train" / "mine.txt").exists() and (out / "valid" / "notes.txt").exists()
    (out / "valid" / "notes.txt").unlink()
    shutil.rmtree(out / "train")
    build(SAMPLE, splits=["valid"], out=out, actors=0, force=True)  # its own files: replaced
    # A shard folder an earlier version built (no marker) is left to the user to remove.
    (out / ".hlgt-folder").unlink()
    with pytest.raises(FileExistsError, match=rf"if an earlier version built it, remove it by hand \(rm -r {out}\)"):
        build(SAMPLE, splits=["valid"], out=out, actors=0, force=True)
    assert len(load_rows(out, "valid")) == load_manifest(out)["splits"]["valid"]["kept"]


def test_a_damaged_manifest_is_named_and_force_rebuilds_it(tmp_path):
    out = build(SAMPLE, splits=["valid"], out=tmp_path / "shards", actors=0)
    (out / MANIFEST).write_text('{"schema_version": 1, "splits": {"val', encoding="utf-8")  # cut short
    with pytest.raises(ValueError, match=rf"{out / MANIFEST} is damaged .*--force"):
        build(SAMPLE, splits=["valid"], out=out, actors=0)
    with pytest.raises(ValueError, match=rf"{out / MANIFEST} is damaged"):
        load_rows(out, "valid")
    build(SAMPLE, splits=["valid"], out=out, actors=0, force=True)
    assert load_manifest(out)["splits"]["valid"]["kept"] > 0


def test_an_annotator_model_that_cannot_load_is_one_line_naming_the_option(tmp_path, capsys):
    from hlgt.commands.build import main
    from hlgt.commands.cli import run_command

    argv = ["--dataset", "sample", "--split", "valid", "--no-ray", "--out", str(tmp_path / "s"),
            "--annotator", "ltp", "--annotator-model", str(tmp_path / "no-model")]
    assert run_command(main, "python -m hlgt.data.build", argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--annotator-model (config key data.annotator_model) '{tmp_path / 'no-model'}': " \
        "there is no such folder; download the LTP model" in err


def test_default_folder_and_cli(tmp_path, monkeypatch, capsys):
    from hlgt.commands.build import main

    cfg = Config.from_flat({"data.dataset": "mawps", "data.fold": 3, "data.annotator": "ltp"})
    assert shards_path(cfg) == Path.cwd() / "datasets/processed/mawps-fold3-ltp"
    assert shards_path(cfg.override({"data.mawps_folds": "graph2tree"})) == Path.cwd() / (
        "datasets/processed/mawps-graph2tree-fold3-ltp")
    assert shards_path(cfg.override({"data.mawps_folds": "graph2tree", "data.mawps_valid": False})) == Path.cwd() / (
        "datasets/processed/mawps-graph2tree-novalid-fold3-ltp")
    monkeypatch.chdir(tmp_path)
    assert main(["--dataset", "sample", "--split", "valid", "--no-ray", "--shards-dir", "p"]) == 0
    assert (tmp_path / "p" / "sample-offline" / MANIFEST).is_file()
    with pytest.raises(SystemExit):
        main(["--dataset", "sample", "--actors", "1,2"])
    assert "--actors takes one number when building (a list only with --bench)" in capsys.readouterr().err


def test_bench_of_a_split_of_one_batch_has_no_steady_rate(tmp_path, monkeypatch, capsys):
    from hlgt.commands.build import main

    monkeypatch.chdir(tmp_path)
    assert main(["--dataset", "sample", "--split", "valid", "--bench", "--actors", "0,0"]) == 0
    out = capsys.readouterr().out
    assert "n/a problems/s after the first batch" in out  # 10 problems: the first batch is all of them
    assert "speed ratio actors 0/0:" in out and "x overall, n/a after the first batch" in out


@pytest.mark.parametrize("option, value, message", [
    ("--batch-size", "-1", "must be >= 1, got -1"),  # it left an empty train.partial/ behind
    ("--batch-size", "0", "must be >= 1, got 0"),
    ("--min-word-freq", "-1", "must be >= 0, got -1"),
])
def test_cli_refuses_a_bad_number_naming_its_option_before_building(tmp_path, capsys, option, value, message):
    from hlgt.commands.build import main

    with pytest.raises(SystemExit) as stop:
        main(["--dataset", "sample", "--no-ray", "--out", str(tmp_path / "out"), option, value])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"hlgt-build: error: argument {option}: {message}" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("in_process", [["--no-ray"], ["--actors", "0"]])
def test_cli_refuses_a_cluster_address_with_an_in_process_build(tmp_path, capsys, in_process):
    # It connected to the cluster and annotated there in one actor, against what --no-ray says.
    from hlgt.commands.build import main

    with pytest.raises(SystemExit):
        main(["--dataset", "sample", *in_process, "--address", "ray://nowhere:10001", "--out", str(tmp_path / "o")])
    assert "--address annotates on that Ray cluster; --no-ray / --actors 0 in this process" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_help_names_every_dataset_it_takes(capsys):
    from hlgt.commands.build import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "usage: hlgt-build" in (out := capsys.readouterr().out)
    assert all(name in out for name in ("sample_zh", "sample_en", "math23k", "mawps", "ape210k"))


@pytest.mark.ray
@pytest.mark.slow
def test_ray_actor_pool_writes_the_same_shards(sample_shards, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = build(SAMPLE, out=tmp_path / "ray", actors=2, batch_size=16)  # uses the running Ray
        assert load_manifest(out)["build"]["actors"] == 2
        for split in SPLITS:
            assert (load_manifest(out)["splits"][split]["shards"]
                    == load_manifest(sample_shards)["splits"][split]["shards"])
            for name in load_manifest(out)["splits"][split]["shards"]:
                assert pq.read_table(out / split / name).equals(pq.read_table(sample_shards / split / name))
        # Ray Train's reading path (hlgt.train.launch): read_parquet, Arrow batches, Python rows.
        assert not ray.data.DataContext.get_current().execution_options.preserve_order  # the build's own
        ds = ray.data.read_parquet(str(out / "test"))
        ds.context.execution_options.preserve_order = True  # as hlgt.train.launch.ordered_ingest
        read = [r for t in ds.iter_batches(batch_size=4096, batch_format="pyarrow") for r in t.to_pylist()]
        assert read == load_rows(out, "test")
        # A batch whose annotation ends the actor's process (a native crash) is retried a few
        # times, then the build stops saying so: Ray Data's default retried it forever.
        import os

        import pyarrow as pa

        from hlgt.data import annotate

        class Crashing:
            def __init__(self, **kwargs):
                pass

            def __call__(self, batch):
                if 5 in batch["index"].to_pylist():
                    os._exit(1)
                return batch

        monkeypatch.setattr(annotate, "AnnotateGraph", Crashing)
        with pytest.raises(ValueError, match=r"the annotation stopped, \d+ problems annotated: an actor could not "
                                             r"start or died 3 times on a batch of at most 4 problems \(.*died"):
            list(annotate.run_ray(pa.table({"index": list(range(16))}), "offline", actors=1, batch_size=4))

        class NotLoading:  # an annotator model that cannot load: its own message, not a crash's
            def __init__(self, **kwargs):
                raise ValueError("cannot load LTP model LTP/nope: set data.annotator_model")

        monkeypatch.setattr(annotate, "AnnotateGraph", NotLoading)
        with pytest.raises(ValueError,
                           match=r"\(ValueError: cannot load LTP model LTP/nope: set data.annotator_model\)"):
            list(annotate.run_ray(pa.table({"index": list(range(16))}), "offline", actors=1, batch_size=4))
    finally:
        ray.shutdown()


@pytest.mark.realdata
def test_ape210k_valid_builds_with_every_problem_accounted(tmp_path):
    data_dir = Path(default_data_dir())
    if not (data_dir / "ape210k" / "valid.ape.json").is_file():
        data_dir = Path(__file__).resolve().parents[1] / default_data_dir()
    if not (data_dir / "ape210k" / "valid.ape.json").is_file():
        pytest.skip("../shared/datasets is absent")
    cfg = Config.from_flat({"data.dataset": "ape210k", "data.data_dir": str(data_dir)})
    out = build(cfg, splits=["valid"], out=tmp_path / "ape", actors=0)
    s = load_manifest(out)["splits"]["valid"]
    assert s["records"] == 5000
    assert s["kept"] + sum(s["dropped"].values()) == s["records"]
    assert s["graph"]["avg_nodes"] > 0


@pytest.mark.realdata
def test_mawps_without_held_out_validation_trains_on_the_other_four_folds(real_data, tmp_path):
    from hlgt.commands.build import main

    assert main(["--dataset", "mawps", "--mawps-folds", "graph2tree", "--no-mawps-valid", "--fold", "0",
                 "--data-dir", str(real_data), "--no-ray", "--shards-dir", str(tmp_path)]) == 0
    manifest = load_manifest(tmp_path / "mawps-graph2tree-novalid-fold0-offline")
    splits = manifest["splits"]
    assert manifest["mawps_valid"] is False and splits["valid"]["records"] == splits["valid"]["kept"] == 0
    assert splits["train"]["records"] == 2373 - 474 and splits["test"]["kept"] == 474


def test_two_commands_building_the_same_folder_at_once_both_succeed(tmp_path):
    """The second waits for the first's lock, then reuses its shards instead of writing into them."""
    import subprocess
    import sys

    from hlgt.data.shards import load_manifest, load_rows

    cmd = [sys.executable, "-m", "hlgt.data.build", "--dataset", "sample", "--no-ray",
           "--shards-dir", str(tmp_path)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    (folder,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    manifest = load_manifest(folder)
    assert len(load_rows(folder, "train")) == manifest["splits"]["train"]["kept"] > 0
    assert sum("annotated" in out for out in outs) == 1  # built once


def test_a_build_that_would_replace_shards_is_refused_while_a_command_reads_them(tmp_path, capsys):
    import contextlib

    from hlgt.data.shards import use_shards

    out = build(SAMPLE, splits=["valid"], out=tmp_path / "shards", actors=0)
    before = {p.name: p.stat().st_mtime_ns for p in (out / "valid").iterdir()}
    with contextlib.ExitStack() as held:
        use_shards(SAMPLE, out, held)
        busy = rf"{out} is being read by a running command .*another folder .*data.shards_dir=DIR"
        with pytest.raises(OSError, match=busy):
            build(SAMPLE, splits=["valid"], out=out, actors=0, force=True)
        assert {p.name: p.stat().st_mtime_ns for p in (out / "valid").iterdir()} == before
        build(SAMPLE, splits=["valid"], out=out, actors=0)  # reused: nothing replaced, so allowed
        assert "reusing" in capsys.readouterr().out
        build(SAMPLE, splits=["test"], out=out, actors=0)  # a new split beside it replaces nothing either
        assert load_rows(out, "valid") and load_rows(out, "test")
        with contextlib.ExitStack() as second:  # a second reader shares the hold
            use_shards(SAMPLE, out, second)
    build(SAMPLE, splits=["valid"], out=out, actors=0, force=True)  # the reader has ended
    assert "building" in capsys.readouterr().out
    (tmp_path / "link").symlink_to(out)  # the folder under another name: the same hold
    with contextlib.ExitStack() as held:
        use_shards(SAMPLE, tmp_path / "link", held)
        with pytest.raises(OSError, match="is being read by a running command"):
            build(SAMPLE, splits=["valid"], out=out, actors=0, force=True)


def test_a_reader_waits_for_a_build_replacing_the_shards(tmp_path, capsys):
    import threading

    from hlgt.storage import not_being_read

    out = build(SAMPLE, splits=["valid"], out=tmp_path / "shards", actors=0)
    rows = []
    with not_being_read(out, "busy"):
        reader = threading.Thread(target=lambda: rows.extend(load_rows(out, "valid")))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and not rows
    reader.join(60)
    assert len(rows) == load_manifest(out)["splits"]["valid"]["kept"] > 0
    assert f"waiting for another command replacing {out}" in capsys.readouterr().out


def test_a_lock_file_another_user_made_is_held_read_only(tmp_path, monkeypatch):
    """Its mode lets this user read it only: the hold is taken through a read-only handle."""
    import builtins

    from hlgt import storage

    out = build(SAMPLE, splits=["valid"], out=tmp_path / "shards", actors=0)
    lock = tmp_path / ".shards.readers"
    lock.touch()
    real_open = builtins.open

    def as_another_user(file, mode="r", *args, **kwargs):
        if Path(file) == lock and mode != "r":
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", as_another_user)
    with storage.reading(out):
        monkeypatch.setattr(builtins, "open", real_open)  # the builder: the lock file's owner
        with pytest.raises(OSError, match="busy"):
            with storage.not_being_read(out, "busy"):
                pass


def test_a_folder_that_takes_no_lock_file_is_read_without_a_hold():
    from hlgt.storage import reading

    with reading(Path("/proc/self/shards")):  # no file can be made there, nor can shards be replaced
        pass


def test_a_storage_without_file_locks_stops_writers_and_lets_readers_read(tmp_path, monkeypatch, capsys):
    # NFS without its lock daemon, Lustre without -o flock: flock fails with ENOLCK.
    import errno

    from hlgt import storage

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(storage.fcntl, "flock", no_locks)
    (tmp_path / "run").mkdir()
    with pytest.raises(OSError, match=r"cannot lock .*\.run\.lock \(No locks available\): this storage takes no"):
        with storage.sole_writer(str(tmp_path / "run"), "busy"):
            pass
    with storage.reading(tmp_path / "run"):
        pass
    assert f"reading {tmp_path / 'run'} without a hold: cannot lock" in capsys.readouterr().out
    monkeypatch.undo()
    with storage.sole_writer(str(tmp_path / "run"), "busy"):  # held: a second writer is refused as busy
        with pytest.raises(OSError, match="^busy$"):
            with storage.sole_writer(str(tmp_path / "run"), "busy"):
                pass


def test_shards_at_a_uri_are_built_locally_and_copied_up(tmp_path, sample_shards, capsys):
    """A cluster's shared storage is a URI (s3://...; file:// here takes the same path through
    pyarrow's filesystems): the shards land there, not in a local folder named after it."""
    from hlgt.data.shards import use_shards

    uri = f"file://{tmp_path}/bucket/processed/sample-offline"
    assert build(SAMPLE, out=uri, actors=0) == uri
    folder = tmp_path / "bucket" / "processed" / "sample-offline"
    assert sorted(p.name for p in folder.iterdir()) == [".hlgt-folder", MANIFEST, "test", "train", "valid"]
    assert not (tmp_path / "file:").exists() and "copied to" in capsys.readouterr().out
    for split in SPLITS:
        assert load_rows(uri, split) == load_rows(sample_shards, split)
    assert load_manifest(uri)["key"] == load_manifest(sample_shards)["key"]
    assert use_shards(SAMPLE, uri) == uri and load_vocab(uri).to_dict() == load_vocab(sample_shards).to_dict()
    build(SAMPLE, out=uri, actors=0)
    assert "reusing" in capsys.readouterr().out
    (folder / "valid" / "part-00000.parquet").unlink()  # a damaged split: built again, the others kept
    train = (folder / "train" / "part-00000.parquet").stat().st_mtime_ns
    build(SAMPLE, out=uri, actors=0)
    assert "building missing or damaged split(s) valid" in capsys.readouterr().out
    assert load_rows(uri, "valid") == load_rows(sample_shards, "valid")
    assert (folder / "train" / "part-00000.parquet").stat().st_mtime_ns == train
    (folder / "test" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds files that are not shards \(test/notes.txt\)"):
        build(SAMPLE, out=uri, actors=0, force=True)
    assert (folder / "test" / "notes.txt").exists() and (folder / MANIFEST).is_file()  # nothing removed
    assert load_rows(uri, "train") == load_rows(sample_shards, "train")
    (folder / "test" / "notes.txt").unlink()
    # Shards of other settings at a URI may be in use (no lock there says): replaced with --force only.
    other = Config.from_flat({"data.dataset": "sample", "data.min_word_freq": 2})
    with pytest.raises(ValueError, match=r"holds shards of other settings.*--force once none does"):
        build(other, out=uri, actors=0)
    assert load_manifest(uri)["key"] == load_manifest(sample_shards)["key"]
    # A rebuild that fails leaves the old shards as they were: they go once the new ones are built.
    import hlgt.data.build as b

    def failing(*args, **kwargs):
        raise ValueError("the annotator's model did not load")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(b, "_build_splits", failing)
        with pytest.raises(ValueError, match="did not load"):
            build(other, out=uri, actors=0, force=True)
    assert load_manifest(uri)["key"] == load_manifest(sample_shards)["key"]
    assert load_rows(uri, "train") == load_rows(sample_shards, "train")
    build(other, out=uri, actors=0, force=True)
    assert load_manifest(uri)["key"] == prepare(other).key


def test_the_default_shard_folder_on_uri_storage_is_under_it(tmp_path, monkeypatch):
    from hlgt.data.build import ensure_shards

    monkeypatch.setenv("HLGT_STORAGE", f"file://{tmp_path}/bucket")
    monkeypatch.chdir(tmp_path)
    folder = ensure_shards(Config.from_flat({"data.dataset": "sample"}))
    assert folder == f"file://{tmp_path}/bucket/datasets/processed/sample-offline"
    assert (tmp_path / "bucket" / "datasets" / "processed" / "sample-offline" / MANIFEST).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bucket"]  # no local folder named "file:"

"""``launch.make_trainer`` and ``launch.fit`` without a Ray cluster: the TorchTrainer is built as a
run would build it (Ray Data's reader and the cluster's CPU count stood in for), and ``fit``
publishes a finished run's outputs. The Ray Train runs themselves are in test_launch.py (slow)."""
import json
from types import SimpleNamespace

import pytest

from hlgt.config import Config
from hlgt.train import launch

TINY = {"data.dataset": "sample", "train.epochs": 1, "train.wandb": False, "model.hidden_size": 16,
        "model.embedding_size": 8, "model.heads": 2, "model.layers": 1}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from hlgt.data.build import ensure_shards

    return ensure_shards(Config.from_flat({**TINY, "data.shards_dir": str(tmp_path_factory.mktemp("processed"))}))


@pytest.fixture
def no_cluster(monkeypatch):
    """Ray Data's reader records the files it was asked for; the cluster has CPUs to spare."""
    import ray.data

    read = []
    monkeypatch.setattr(ray.data, "read_parquet", lambda path: read.append(path) or (lambda: path))
    monkeypatch.setattr(launch, "worker_cpus", lambda workers, requested: 1.0)
    return read


def test_make_trainer_builds_the_run_without_starting_ray(shards, no_cluster, tmp_path):
    import ray
    from ray.train.torch import TorchTrainer

    trainer = launch.make_trainer(Config.from_flat(TINY), shards, name="run", storage=str(tmp_path), workers=2,
                                  keep=3, max_failures=2)
    assert isinstance(trainer, TorchTrainer) and not ray.is_initialized()
    # The manifest's shard files, not whatever else a split's folder holds.
    (shards / "train" / "part-99999.parquet").write_bytes(b"left over from another build")
    trainer = launch.make_trainer(Config.from_flat(TINY), shards, name="run", storage=str(tmp_path), workers=2,
                                  keep=3, max_failures=2)
    manifest = json.loads((shards / "manifest.json").read_text())["splits"]
    assert no_cluster[-3:] == [[f"{shards}/{split}/{name}" for name in manifest[split]["shards"]]
                               for split in ("train", "valid", "test")]
    (shards / "train" / "part-99999.parquet").unlink()
    run = trainer.run_config
    assert (run.name, run.storage_path) == ("run", str(tmp_path))
    assert run.failure_config.max_failures == 2 and run.checkpoint_config.num_to_keep == 3
    assert trainer.scaling_config.num_workers == 2
    config = trainer.train_loop_config
    assert config["cfg"] == Config.from_flat(TINY).to_flat() and config["run_name"] == "run"
    assert config["wandb_dir"] == str(tmp_path / "run")
    # Every split read in its files' order: the ranks decode interleaved slices of validation, and a
    # resumed run trains on the shares it trained on.
    data = trainer.data_config
    assert all(data._resolve_execution_options(split).preserve_order for split in ("train", "valid", "test"))


def test_the_training_problems_an_equal_split_leaves_out_are_said(shards, no_cluster, tmp_path, capsys):
    from hlgt.data.shards import load_manifest

    kept = load_manifest(shards)["splits"]["train"]["kept"]
    workers = next(w for w in range(2, 10) if kept % w)
    launch.make_trainer(Config.from_flat(TINY), shards, name="run", storage=str(tmp_path), workers=workers)
    assert (f"{workers} workers take equal shares of the {kept} training problems: {kept % workers} left over are "
            "not trained on") in capsys.readouterr().out
    divides = next(w for w in range(1, 10) if kept % w == 0)
    launch.make_trainer(Config.from_flat(TINY), shards, name="run", storage=str(tmp_path), workers=divides)
    assert "left over" not in capsys.readouterr().out
    with pytest.raises(ValueError, match=f"{kept + 1} workers for {kept} training problems"):
        launch.make_trainer(Config.from_flat(TINY), shards, name="run", storage=str(tmp_path), workers=kept + 1)


def test_without_a_validation_split_checkpoints_are_kept_by_recency(tmp_path, no_cluster):
    """No report of such a run holds a score to rank checkpoints by (Ray would log an error for the
    final one and rank it last): the latest are kept."""
    from hlgt.data.build import build

    cfg = Config.from_flat(TINY)
    with_valid = launch.make_trainer(cfg, build(cfg, out=tmp_path / "all", actors=0), name="a",
                                     storage=str(tmp_path))
    assert with_valid.run_config.checkpoint_config.checkpoint_score_attribute == "val/value_acc"
    without = launch.make_trainer(cfg, build(cfg, splits=["train", "test"], out=tmp_path / "novalid", actors=0),
                                  name="b", storage=str(tmp_path))
    assert without.run_config.checkpoint_config.checkpoint_score_attribute is None


def test_shards_at_a_uri_are_read_from_it(shards, no_cluster, tmp_path):
    """On a cluster's URI storage (s3://..., file:// here) every node's Ray Data reads the URI."""
    import shutil

    shutil.copytree(shards, tmp_path / "bucket" / "shards")
    uri = f"file://{tmp_path}/bucket/shards"
    trainer = launch.make_trainer(Config.from_flat(TINY), uri, name="run", storage=str(tmp_path))
    assert sorted({path.rsplit("/", 1)[0] for paths in no_cluster for path in paths}) == [
        f"{uri}/{split}" for split in ("test", "train", "valid")]
    assert trainer.train_loop_config["shards_dir"] == uri
    on_uri = launch.make_trainer(Config.from_flat(TINY), uri, name="run", storage=f"file://{tmp_path}/runs")
    assert on_uri.train_loop_config["wandb_dir"] == "~/hlgt-wandb/run"  # wandb writes local files


def test_make_trainer_refuses_a_folder_that_holds_no_shards(tmp_path, no_cluster):
    with pytest.raises(FileNotFoundError, match="python -m hlgt.data.build"):
        launch.make_trainer(Config.from_flat(TINY), tmp_path, name="run", storage=str(tmp_path / "runs"))
    assert not no_cluster


def test_fit_publishes_the_final_checkpoints_outputs(monkeypatch, tmp_path):
    final = tmp_path / "storage" / "run" / "checkpoint_000003"
    (final / "best").mkdir(parents=True)
    (final / "best" / "weights.pt").write_bytes(b"w")
    (final / "results.json").write_text(json.dumps({"test_value_acc": 0.5}))
    result = SimpleNamespace(checkpoint=SimpleNamespace(path=str(final)), return_value={"test_value_acc": 0.5},
                             metrics={})
    made = {}

    def make_trainer(cfg, shards_dir, **kwargs):
        made.update(kwargs)
        return SimpleNamespace(fit=lambda: result)

    monkeypatch.setattr(launch, "make_trainer", make_trainer)
    out = launch.fit(Config.from_flat(TINY), tmp_path, name="run", storage=str(tmp_path / "storage"), keep=2)
    assert made == {"name": "run", "storage": str(tmp_path / "storage"), "keep": 2}
    assert out.metrics == {"test_value_acc": 0.5} and out.checkpoint == str(final) and out.error is None
    assert (tmp_path / "storage" / "run" / "best" / "weights.pt").read_bytes() == b"w"
    assert json.loads((tmp_path / "storage" / "run" / "results.json").read_text()) == {"test_value_acc": 0.5}
    # Published again over the first (a re-run of a finished run), and over a publish killed midway:
    # the new copy, whole, and nothing left beside it.
    (final / "best" / "weights.pt").write_bytes(b"w2")
    (tmp_path / "storage" / "run" / ".best.new").mkdir()
    launch.fit(Config.from_flat(TINY), tmp_path, name="run", storage=str(tmp_path / "storage"))
    run = tmp_path / "storage" / "run"
    assert (run / "best" / "weights.pt").read_bytes() == b"w2"
    assert sorted(p.name for p in run.iterdir()) == ["best", "checkpoint_000003", "results.json"]


def test_a_worker_s_bad_input_error_is_the_command_s_one_line(monkeypatch, tmp_path):
    # A damaged checkpoint is read on the workers: Ray wraps the loop's ValueError.
    from ray.train.v2.api.exceptions import WorkerGroupError

    damaged = ValueError("trainer_state.pt is damaged (...): --fresh starts the run over")
    crashed = RuntimeError("CUDA error")

    def failing(error):
        def fit():
            raise WorkerGroupError("Training failed", {1: error, 0: error})
        return lambda cfg, shards_dir, **kwargs: SimpleNamespace(fit=fit)

    monkeypatch.setattr(launch, "make_trainer", failing(damaged))
    with pytest.raises(ValueError, match="damaged") as raised:
        launch.fit(Config.from_flat(TINY), tmp_path, name="run", storage=str(tmp_path / "storage"))
    assert raised.value is damaged
    monkeypatch.setattr(launch, "make_trainer", failing(crashed))
    with pytest.raises(WorkerGroupError):  # not the loop's: Ray's error, as raised
        launch.fit(Config.from_flat(TINY), tmp_path, name="run", storage=str(tmp_path / "storage"))
    out = launch.fit(Config.from_flat(TINY), tmp_path, name="run", storage=str(tmp_path / "storage"),
                     raise_on_error=False)
    assert isinstance(out.error, WorkerGroupError)


def test_a_damaged_config_of_a_ray_checkpoint_names_its_file(tmp_path):
    (tmp_path / "checkpoint_000001").mkdir()
    (tmp_path / "checkpoint_000001" / "config.json").write_text('{"model.heads": 2,')
    with pytest.raises(ValueError, match="checkpoint_000001/config.json is damaged: Expecting"):
        launch.resumed_config(str(tmp_path))


def test_fit_on_uri_storage_publishes_into_the_run_folder_there(monkeypatch, tmp_path):
    """Ray names a checkpoint at a URI by its path in the storage's filesystem; the outputs are
    copied from there into ``<storage>/<run>/`` (file:// here, s3:// on a cluster)."""
    import pyarrow.fs

    final = tmp_path / "bucket" / "run" / "checkpoint_000003"
    (final / "best").mkdir(parents=True)
    (final / "best" / "weights.pt").write_bytes(b"w")
    (final / "results.json").write_text(json.dumps({"test_value_acc": 0.5}))
    result = SimpleNamespace(checkpoint=SimpleNamespace(path=str(final), filesystem=pyarrow.fs.LocalFileSystem()),
                             return_value={"test_value_acc": 0.5}, metrics={})
    monkeypatch.setattr(launch, "make_trainer", lambda cfg, shards_dir, **kwargs: SimpleNamespace(fit=lambda: result))
    out = launch.fit(Config.from_flat(TINY), tmp_path, name="run", storage=f"file://{tmp_path}/bucket")
    assert out.run_dir == f"file://{tmp_path}/bucket/run" and out.metrics == {"test_value_acc": 0.5}
    run = tmp_path / "bucket" / "run"
    assert (run / "best" / "weights.pt").read_bytes() == b"w" and (run / "results.json").is_file()


def test_on_uri_storage_outputs_go_to_the_run_folder_ray_named(monkeypatch, tmp_path):
    """Into the checkpoint's parent: a run named 'foo#1' (a URI would read '#1' as a fragment)."""
    import pyarrow.fs

    final = tmp_path / "bucket" / "foo#1" / "checkpoint_1"
    (final / "best").mkdir(parents=True)
    (final / "best" / "weights.pt").write_bytes(b"w")
    result = SimpleNamespace(checkpoint=SimpleNamespace(path=str(final), filesystem=pyarrow.fs.LocalFileSystem()),
                             return_value={"epoch": 1}, metrics={})
    monkeypatch.setattr(launch, "make_trainer", lambda cfg, shards_dir, **kwargs: SimpleNamespace(fit=lambda: result))
    launch.fit(Config.from_flat(TINY), tmp_path, name="foo#1", storage=f"file://{tmp_path}/bucket")
    assert (tmp_path / "bucket" / "foo#1" / "best" / "weights.pt").read_bytes() == b"w"
    assert not (tmp_path / "bucket" / "foo").exists()


@pytest.mark.parametrize("total, workers", [(3.0, 3), (6.0, 3), (4.0, 7), (2.0, 1)])
def test_a_cpu_request_that_starves_ray_data_is_refused_with_a_limit_that_fits(monkeypatch, total, workers):
    import ray

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": total})
    assert launch.worker_cpus(workers) * workers <= total - 1.0 + 1e-9  # fitted when not asked
    with pytest.raises(ValueError, match="use at most ([0-9.]+) CPU per worker") as refused:
        launch.worker_cpus(workers, (total - 1.0) / workers + 0.01)
    limit = float(refused.value.args[0].rsplit("use at most ", 1)[1].split()[0])
    assert launch.worker_cpus(workers, limit) == limit  # the limit it names is accepted (rounded down)

"""The sweep: search space sampling, the spec, the results table and chart, the command line
(``hlgt.commands.sweep``, run as ``tune/sweep.py``); and (Ray) a two-arm sweep on the sample data that writes
the table, the chart, the best models and one offline W&B run per trial."""
import json
import math
import pickle
import re
import shutil
import sys
from pathlib import Path

import pytest

from hlgt import config as C
from hlgt import metrics as M
from hlgt.commands import sweep as command
from hlgt.sweep import results, space
from hlgt.sweep.spec import SweepSpec, build_shards

CENTRE = {"model.heads": 4, "model.layers": 2, "model.beta_com": 0.1, "train.lr": 1e-3}




def test_parse_values():
    assert space.parse_values("2,4, 8") == [2, 4, 8]
    assert space.parse_values("0.05,1e-3") == [0.05, 1e-3]
    assert space.parse_values("true,srl") == [True, "srl"]


def test_samples_start_at_the_centre_and_stay_distinct():
    configs = space.sample_configs(space.DEFAULT_SPACE, CENTRE, n=6, seed=3)
    assert configs[0] == {"model.heads": 4, "model.layers": 2, "model.beta_com": 0.1}
    assert len(configs) == 6 and len({json.dumps(c, sort_keys=True) for c in configs}) == 6
    for c in configs:
        assert all(c[k] in v for k, v in space.DEFAULT_SPACE.items())
    assert space.sample_configs(space.DEFAULT_SPACE, CENTRE, n=6, seed=3) == configs  # seeded
    assert len(space.sample_configs({"model.heads": [2, 4]}, CENTRE, n=10)) == 2  # capped by the space


def test_grid_and_continuous_dimensions():
    grid = space.sample_configs({"model.heads": [2, 4], "model.layers": [1, 2, 3]}, CENTRE, n=1, grid=True)
    assert len(grid) == 6
    lr = space.sample_configs({"train.lr": {"loguniform": [1e-4, 1e-2]}}, CENTRE, n=5, seed=1)
    assert lr[0] == {"train.lr": 1e-3} and all(1e-4 <= c["train.lr"] <= 1e-2 for c in lr)
    # A centre outside the space is replaced by the space's middle.
    assert space.sample_configs({"train.lr": {"uniform": [0.1, 0.3]}}, CENTRE, n=1)[0]["train.lr"] == pytest.approx(0.2)
    assert space.sample_configs({"model.heads": [1, 2, 8]}, CENTRE, n=1) == [{"model.heads": 2}]
    with pytest.raises(ValueError, match="not a config key"):
        space.sample_configs({"model.head": [2]}, CENTRE, n=1)
    with pytest.raises(ValueError, match="list of values"):
        space.sample_configs({"model.heads": {"normal": [0, 1]}}, CENTRE, n=1)


def test_smoke_plan(tmp_path):
    args = command.build_parser().parse_args(
        ["--ablation", "no_line_graph", "--smoke-test", "--storage", str(tmp_path / "sweeps"),
         "--set", f"data.shards_dir={tmp_path / 'processed'}", "--seeds", "1,2"])
    spec = command.make_spec(args)
    spec.shards = build_shards(spec)
    assert spec.arms == ["full", "no_line_graph"]  # the reference arm is added
    assert spec.samples == [{"model.heads": 4, "model.layers": 2, "model.beta_com": 0.1}]
    assert spec.replicates == [{"data.fold": 0, "train.seed": 1}, {"data.fold": 0, "train.seed": 2}]
    assert (spec.base["data.dataset"] == "sample"
            and spec.base["model.hidden_size"] == command.SMOKE["model.hidden_size"])
    assert spec.trial_flat("no_line_graph", 0, 1)["model.line_graph"] is False
    assert spec.trial_flat("no_line_graph", 0, 1)["train.seed"] == 2
    assert spec.shards == {0: str(tmp_path / "processed" / "sample-offline")}
    assert (tmp_path / "processed" / "sample-offline" / "manifest.json").exists()
    assert spec.root == str(tmp_path / "sweeps" / spec.name)
    assert pickle.loads(pickle.dumps(spec)) == spec  # Tune hands it to every trial (with_parameters)

    # The same from a YAML file; command-line flags win over it.
    space = tmp_path / "space.yaml"
    space.write_text("space:\n  model.heads: [2, 4]\n  train.lr: {loguniform: [1.0e-4, 1.0e-2]}\n"
                     "num_samples: 3\nablation: [gts, hgt]\nset: {train.epochs: 7}\n")
    args = command.build_parser().parse_args(
        ["--space", str(space), "--dataset", "sample", "--no-reference", "--layers", "1,3", "--storage",
         str(tmp_path / "sweeps"), "--set", f"data.shards_dir={tmp_path / 'processed'}"])
    spec = command.make_spec(args)
    assert spec.arms == ["gts", "hgt"] and spec.base["train.epochs"] == 7 and len(spec.samples) == 3
    assert set(spec.samples[0]) == {"model.heads", "train.lr", "model.layers"}
    assert spec.samples[0] == {"model.heads": 4, "train.lr": 1e-3, "model.layers": 3}  # the centre, within the space
    space.write_text("space: {}\n")  # no search: the one configuration, not the default search
    spec = command.make_spec(command.build_parser().parse_args(
        ["--space", str(space), "--dataset", "sample", "--storage", str(tmp_path / "sweeps"),
         "--set", f"data.shards_dir={tmp_path / 'processed'}"]))
    assert spec.samples == [{}]


def test_results_table_and_chart(tmp_path, monkeypatch, capsys):
    rows = [
        {"arm": "full", "config": "heads=4 layers=2 beta_com=0.1", "runs": 3, "stopped_early": 1, "trials": 12,
         "failed": 0, "without_model": 2,
         "val_value_acc_mean": 0.80, "val_value_acc_std": 0.01, "test_value_acc_mean": 0.78,
         "test_value_acc_std": 0.02, "test_equation_acc_mean": 0.70, "test_equation_acc_std": 0.03,
         "checkpoints": ["/s/train/full-s0-r0-a/checkpoint_1/best"]},
        {"arm": "no_line_graph", "config": "heads=2 layers=2 beta_com=0.1", "runs": 1, "stopped_early": 0,
         "trials": 12, "failed": 1, "without_model": 0, "val_value_acc_mean": 0.75, "val_value_acc_std": math.nan,
         "test_value_acc_mean": 0.74, "test_value_acc_std": math.nan, "test_equation_acc_mean": 0.66,
         "test_equation_acc_std": math.nan,
         "checkpoints": ["/s/train/no_line_graph-s1-r0-b/checkpoint_2/best"]},
    ]
    paths = results.write_results(tmp_path, rows, "seeds", "t")
    md = paths["md"].read_text()
    assert "| full | heads=4 layers=2 beta_com=0.1 | 80.0 ± 1.0 | 78.0 ± 2.0 | 70.0 ± 3.0 | 3 | 1 | 12 | 0 | 2 |" in md
    assert "| no_line_graph | heads=2 layers=2 beta_com=0.1 | 75.0 | 74.0 | 66.0 | 1 | 0 | 12 | 1 | 0 |" in md
    assert "| seeds | of them stopped early | trials | failed | without a model |" in md
    assert "- full: /s/train/full-s0-r0-a/checkpoint_1/best\n- no_line_graph: /s/train/no_line_graph-s1-r0-b" in md
    assert paths["csv"].read_text().splitlines() == [",".join(results.CSV_COLUMNS)]  # no replicate rows given
    assert json.loads(paths["json"].read_text())[1]["arm"] == "no_line_graph"
    assert json.loads(paths["json"].read_text())[1]["val_value_acc_std"] is None  # strict JSON: no NaN
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Without matplotlib (an offline GPU node may lack it): the table, no chart, a note.
    monkeypatch.setattr(results.importlib.util, "find_spec", lambda name: None if name == "matplotlib" else True)
    paths = results.write_results(tmp_path / "bare", rows, "seeds", "t")
    assert "png" not in paths and not (tmp_path / "bare" / "results.png").exists() and paths["md"].exists()
    assert "matplotlib is not installed: no results.png" in capsys.readouterr().out


def test_mean_std():
    mean, std = results.mean_std([0.5])
    assert mean == 0.5 and math.isnan(std)  # one value has no deviation to show
    m, s = results.mean_std([0.4, 0.6])
    assert m == pytest.approx(0.5) and s == pytest.approx(math.sqrt(0.02))


@pytest.mark.ray
@pytest.mark.slow
def test_two_arm_sweep_writes_table_chart_and_wandb_runs(tmp_path, monkeypatch, capsys):
    import ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    storage = tmp_path / "sweeps"
    argv = ["--ablation", "no_line_graph", "--smoke-test", "--name", "t", "--storage", str(storage),
            "--set", f"data.shards_dir={tmp_path / 'processed'}", "--set", "train.epochs=2"]
    try:
        assert command.main(argv) == 0
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    root = storage / "t"
    assert "| full |" in out and "| no_line_graph |" in out
    # Quiet by default: one line per trial per epoch, not Tune's status tables or the workers' logs.
    assert "epoch 1 |" in out and "epoch 2 |" in out and "[sweep] no_line_graph-s0-r0-" in out
    assert "Trial status" not in out and "RayTrainWorker" not in out
    results = json.loads((root / "results.json").read_text())
    assert [r["arm"] for r in results] == ["full", "no_line_graph"]
    for r in results:
        assert r["runs"] == 1 and 0.0 <= r["test_value_acc_mean"] <= 1.0
        assert (root / "best" / r["arm"] / "replicate0" / "predictions_test.jsonl").exists()
        assert f"- {r['arm']}: {r['checkpoints'][0]}" in out and Path(r["checkpoints"][0], "model.pt").exists()
    assert (root / "results.png").read_bytes()[:4] == b"\x89PNG" and (root / "results.csv").exists()
    # One offline W&B run per trial (named by arm and trial, grouped by the sweep) + the summary run.
    runs = sorted(root.glob("wandb/offline-run-*"))
    assert len(runs) == 3
    logs = [next(r.glob("run-*.wandb")).read_bytes() for r in runs]
    trial_logs = [log for log in logs if b"train/loss" in log]
    assert len(trial_logs) == 2 and all(b"val/value_acc" in log for log in trial_logs)
    assert any(b"full-s0-r0" in log for log in trial_logs) and any(b"no_line_graph-s0-r0" in log for log in trial_logs)
    assert sum(b"t-results" in log for log in logs) == 1

    # The storage lost but the records of --so-far (so-far/best/): the re-run trains nothing and
    # tables the same test predictions.
    assert command.main(argv + ["--so-far"]) == 0
    for lost in root.iterdir():
        if lost.name != "so-far" and not lost.name.startswith("."):
            shutil.rmtree(lost) if lost.is_dir() else lost.unlink()
    capsys.readouterr()
    try:
        assert command.main(argv + ["--no-wandb"]) == 0
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    assert "2 trial(s) recorded as tested" in out and "epoch 1 |" not in out
    again = json.loads((root / "results.json").read_text())
    assert [r["test_value_acc_mean"] for r in again] == [r["test_value_acc_mean"] for r in results]
    assert all("only the test predictions were kept" in r["checkpoints"][0] for r in again)


def test_an_arm_trains_each_distinct_model_once(tmp_path):
    spec = SweepSpec(name="t", storage=str(tmp_path), base={"data.dataset": "sample"},
                     arms=["full", "gts", "no_aux_task"],
                      samples=[{"model.heads": 4, "model.beta_com": 0.1}, {"model.heads": 2, "model.beta_com": 0.1},
                               {"model.heads": 4, "model.beta_com": 0.2}, {"model.heads": 8, "model.beta_com": 0.2}],
                      replicates=[{"data.fold": 0, "train.seed": 1}], shards={})
    assert spec.arm_samples("full") == [0, 1, 2, 3]
    assert spec.arm_samples("no_aux_task") == [0, 1, 3]  # beta_com unread: sample 2 is sample 0
    assert spec.arm_samples("gts") == [0]  # no graph encoder, no comparison head
    assert spec.arm_params("gts", 3) == {} and space.describe(spec.arm_params("gts", 3)) == "defaults"
    assert spec.arm_params("no_aux_task", 3) == {"model.heads": 8}


def test_command_line_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown ablation arm 'nope'; the arms are full, "):
        command.main(["--ablation", "full,nope", "--storage", str(tmp_path)])
    with pytest.raises(ValueError, match="unknown config keys"):
        command.main(["--set", "model.nope=1", "--storage", str(tmp_path)])
    # Every point of the search space is checked before Ray starts or a shard is built.
    with pytest.raises(ValueError, match=r"trial full heads=3 .*model.heads=3 must be >= 1 and divide"):
        command.main(["--heads", "3,4", "--grid", "--storage", str(tmp_path)])
    with pytest.raises(ValueError, match="expects int, got 'abc'"):
        command.main(["--heads", "abc", "--storage", str(tmp_path)])
    with pytest.raises(ValueError, match=r"fold=7 seed=1: bad config: data.fold=7 must lie in 0..4"):
        command.main(["--dataset", "mawps", "--folds", "0,7", "--storage", str(tmp_path)])
    with pytest.raises(ValueError, match="--no-mawps-valid leaves no validation split to choose among configurations "
                                         "on, and --heads asks for a search"):
        command.main(["--dataset", "mawps", "--no-mawps-valid", "--heads", "2,4", "--storage",
                      str(tmp_path)])
    with pytest.raises(ValueError, match="--seeds takes integers, got 'a', 'b'"):
        command.main(["--seeds", "a,b", "--storage", str(tmp_path)])
    # Twice the same replicate or arm would count its problems twice; none named is no default.
    for argv, message in ((["--seeds", "1,2,1"], "--seeds names 1 twice"),
                          (["--dataset", "mawps", "--folds", "0,0"], "--folds names 0 twice"),
                          (["--ablation", "gts,full,gts"], r"arm\(s\) named twice: gts"),
                          (["--ablation", ","], "no arm named: give one or more of full, ")):
        with pytest.raises(ValueError, match=message):
            command.main([*argv, "--storage", str(tmp_path)])
    space = tmp_path / "space.yaml"
    for text, message in (("space: [", f"{space} is not valid YAML: while parsing"),
                          ("- 1\n", f"{space}: expected a mapping"),
                          ("num_samples: 0\n", "num_samples must be an integer >= 1, got 0"),
                          # the shards are built once per fold: a searched data setting would not reach them
                          ("space:\n  data.min_word_freq: [1, 5]\n",
                           "the search varies data.min_word_freq, which the sweep's shards"),
                          ("ablation: []\n", "ablation must be an arm name or a list of them, got \\[\\]"),
                          ("space:\n  train.lr: {loguniform: [1.0e-4, 1.0e-2]}\n",
                           "--grid needs every dimension to be a list of values; train.lr is a range")):
        space.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            command.main(["--space", str(space), "--storage", str(tmp_path / "runs"),
                          *(["--grid"] if "loguniform" in text else [])])
    space.unlink()
    assert not any(tmp_path.iterdir())  # nothing was started or written
    for n in ("0", "-2"):  # not "the default", not an empty sweep
        with pytest.raises(SystemExit):
            command.build_parser().parse_args(["--num-samples", n])
        assert "argument --num-samples: must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # no abbreviations: --abl is not --ablation
        command.build_parser().parse_args(["--abl", "gts"])
    assert "unrecognized arguments: --abl" in capsys.readouterr().err


def test_trials_are_packed_on_a_gpu_by_measured_memory():
    from hlgt.sweep.experiments import CUDA_CONTEXT_BYTES, trials_per_gpu

    gib = 2**30
    # An H100's 80 GiB, 64 of them usable: a 2.4 GiB trial plus its context fits 18 times.
    assert trials_per_gpu(80 * gib, int(2.4 * gib)) == int(64 * gib // (int(2.4 * gib) + CUDA_CONTEXT_BYTES))
    assert trials_per_gpu(16 * gib, 20 * gib) == 1  # too big for the margin: still one
    assert trials_per_gpu(24 * gib, int(8.5 * gib)) == 2


def test_gpus_per_worker_defaults_to_packing_and_rejects_negatives(tmp_path):
    args = command.build_parser().parse_args(["--storage", str(tmp_path)])
    assert command.make_spec(args).gpus_per_worker is None  # decided once Ray is up
    args = command.build_parser().parse_args(["--storage", str(tmp_path), "--gpus-per-worker", "0"])
    assert command.make_spec(args).gpus_per_worker == 0.0
    with pytest.raises(ValueError, match="must be >= 0"):
        command.main(["--storage", str(tmp_path), "--gpus-per-worker", "-1"])


def test_the_sweep_refuses_a_set_on_a_key_its_flags_set(tmp_path):
    # --set and the YAML's set won over some flags and lost to others; now neither may name their keys.
    for key, flag in (("train.workers", "--workers-per-trial"), ("train.seed", "--seeds"), ("data.fold", "--folds"),
                      ("train.out_dir", "--storage")):  # the replicates' seeds and folds, the trials' folder
        with pytest.raises(ValueError, match=f"--set {key}=... and {flag} both set"):
            command.make_spec(command.build_parser().parse_args(["--storage", str(tmp_path), "--set", f"{key}=1"]))
    yaml_file = tmp_path / "sweep.yaml"
    yaml_file.write_text("set:\n  data.dataset: math23k\n")
    with pytest.raises(ValueError, match="sweep.yaml's set: data.dataset=... and --dataset both set"):
        command.make_spec(command.build_parser().parse_args(["--storage", str(tmp_path), "--space", str(yaml_file)]))


@pytest.mark.usefixtures("one_thread")
def test_the_probe_runs_a_trials_steps_with_every_shape_cuda_graphs_would_capture(tmp_path, stand_in_graphs,
                                                                                   monkeypatch):
    # The probe's steps are what a trial runs: with train.cuda_graphs, each shape learned is
    # captured (its graphs' memory counts), one step each; without, one step on the longest batch.
    import torch

    monkeypatch.setattr("hlgt.train.cuda_graphs.DEPTHS", (2, 3, 4, 5))  # the sample's trees are shallow

    from hlgt.config import Config
    from hlgt.data.build import ensure_shards
    from hlgt.data.collate import iter_batches
    from hlgt.data.shards import load_rows, load_vocab
    from hlgt.model.solver import Solver
    from hlgt.sweep.experiments import probe_steps
    from hlgt.train.cuda_graphs import GraphedSteps

    tiny = {"data.dataset": "sample", "train.batch_size": 8, "model.embedding_size": 8, "model.hidden_size": 16,
            "model.heads": 2, "model.layers": 1, "train.wandb": False, "data.shards_dir": str(tmp_path)}
    cfg = Config.from_flat({**tiny, "train.cuda_graphs": True})
    shards = ensure_shards(cfg)
    vocab = load_vocab(shards)
    rows = [r for r in load_rows(shards, "train") if r["prefix"] is not None]
    learned = GraphedSteps(Solver(cfg.model, vocab))
    learned.learn(iter_batches(rows, vocab, 8, shuffle=True, seed=cfg.train.seed))
    assert probe_steps(cfg, vocab, rows, torch.device("cpu")) == len(learned.buckets) == len(stand_in_graphs) > 1
    assert probe_steps(Config.from_flat(tiny), vocab, rows, torch.device("cpu")) == 0
    assert len(stand_in_graphs) == len(learned.buckets)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_the_gpu_memory_probe_measures_one_step_per_arm(tmp_path):
    from hlgt.sweep.experiments import probe_gpu_memory, trials_per_gpu

    args = command.build_parser().parse_args(["--smoke-test", "--ablation", "gts", "--storage", str(tmp_path),
                                              "--set", f"data.shards_dir={tmp_path / 'p'}"])
    spec = command.make_spec(args)
    spec.shards = build_shards(spec)
    peak, total = probe_gpu_memory(spec)
    assert 0 < peak < total and trials_per_gpu(total, peak) >= 1


def test_a_sweep_saved_by_another_weights_format_stops_before_ray_and_fresh_starts_over(tmp_path, capsys):
    from hlgt.model.solver import WEIGHTS_FORMAT
    from hlgt.sweep.spec import check_saved_weights, remove_earlier, save_settings

    argv = ["--smoke-test", "--storage", str(tmp_path / "sweeps"), "--name", "again"]
    spec = command.make_spec(command.build_parser().parse_args(argv))
    check_saved_weights(spec)  # a new sweep: nothing saved yet
    save_settings(spec)  # the sweep made its folder

    def save(folder: Path, fmt: int) -> None:
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"model.hidden_size": 8, "weights_format": fmt}))
        (folder / "model.pt").write_bytes(b"")

    root = Path(spec.root)
    save(root / "train" / "full-s0-r0-a" / "best", WEIGHTS_FORMAT)
    check_saved_weights(spec)  # this version's models: the sweep resumes
    save(root / "train" / "full-s0-r0-b" / "checkpoint_1" / "best", WEIGHTS_FORMAT - 1)
    with pytest.raises(ValueError, match=rf"holds models of weights format {WEIGHTS_FORMAT - 1} .*full-s0-r0-b.*"
                                         rf"computes format {WEIGHTS_FORMAT}: re-run with --fresh"):
        command.main(argv)

    remove_earlier(spec)  # what --fresh does before the sweep starts
    assert not root.exists() and (tmp_path / "sweeps").is_dir()
    assert "--fresh: removed" in capsys.readouterr().out
    check_saved_weights(spec)
    remove_earlier(spec)  # nothing to remove: no error


def test_a_sweep_trains_on_prebuilt_shards(tmp_path):
    from hlgt.data.build import ensure_shards
    from hlgt.sweep.spec import build_shards

    argv = ["--smoke-test", "--storage", str(tmp_path / "sweeps")]
    spec = command.make_spec(command.build_parser().parse_args(argv))
    folder = ensure_shards(spec.centre.override({"data.shards_dir": str(tmp_path / "elsewhere")}))
    assert build_shards(spec, prebuilt=str(folder)) == {0: str(folder.resolve())}
    (tmp_path / "byfold").mkdir()
    (tmp_path / "byfold" / "0").symlink_to(folder)
    assert build_shards(spec, prebuilt=str(tmp_path / "byfold" / "{fold}")) == {0: str(folder.resolve())}
    assert build_shards(spec, prebuilt=f"file://{folder}") == {0: f"file://{folder}"}  # a URI, as the trials read it
    spec.replicates = [{"data.fold": 0, "train.seed": 1}, {"data.fold": 1, "train.seed": 1}]
    with pytest.raises(ValueError, match=r"one folder for folds \[0, 1\]: give a pattern with \{fold\}"):
        build_shards(spec, prebuilt=str(folder))
    # A folder built for another dataset is refused before Ray starts, with the command's prefix.
    with pytest.raises(ValueError, match=r".* holds .*'dataset': 'sample'.* this run needs .*'dataset': 'mawps'"):
        command.main(["--dataset", "mawps", "--shards", str(folder), "--storage", str(tmp_path / "sweeps")])


def test_concurrency_fits_the_cluster_and_notes_a_max_concurrent_beyond_it(tmp_path, monkeypatch, capsys):
    import ray

    from hlgt.sweep.experiments import concurrency, gpu_share, ray_units, trials_that_fit

    spec = command.make_spec(command.build_parser().parse_args(["--smoke-test", "--storage", str(tmp_path)]))
    two_cpus, big = {"CPU": 2.0}, {"CPU": 16.0, "GPU": 1.0}
    spec.gpus_per_worker = 0.0  # as resolve_gpus leaves it on a cluster without GPUs
    assert trials_that_fit(spec, two_cpus) == 1  # one CPU stays free for Ray Data's reads
    spec.gpus_per_worker = 0.25
    assert trials_that_fit(spec, big) == 4 and trials_that_fit(spec, {"CPU": 16.0}) == 0
    for n in range(1, 65):  # the share Ray holds n of (units of 1e-4) packs n; 1 / n as Ray rounds it
        spec.gpus_per_worker = gpu_share(n)
        assert trials_that_fit(spec, {"CPU": 200.0, "GPU": 1.0}) == n
        assert trials_that_fit(spec, {"CPU": 200.0, "GPU": 2.0}) == 2 * n
        assert gpu_share(n) > 1 / (n + 1)
        spec.gpus_per_worker = 1.0 / n
        assert trials_that_fit(spec, {"CPU": 200.0, "GPU": 1.0}) == (n if n * ray_units(1.0 / n) <= 10_000 else n - 1)
    spec.gpus_per_worker = 1.0 / 5  # 1.0 // 0.2 is 4.0 in floats
    assert trials_that_fit(spec, {"CPU": 200.0, "GPU": 1.0}) == 5
    spec.gpus_per_worker = 1.0 / 7  # 0.1429 in Ray: seven would take 1.0003 GPUs
    assert trials_that_fit(spec, {"CPU": 200.0, "GPU": 1.0}) == 6
    with pytest.raises(ValueError, match="a GPU shared by 0 processes"):
        gpu_share(0)
    spec.gpus_per_worker = 0.0
    monkeypatch.setattr(ray, "cluster_resources", lambda: two_cpus)
    assert concurrency(spec) == 1 and capsys.readouterr().out == ""
    spec.max_concurrent = 4  # more than fits: kept (an autoscaler may add nodes), with a note
    assert concurrency(spec) == 4
    assert "--max-concurrent 4: this cluster fits 1 trial(s) now" in capsys.readouterr().out
    spec.max_concurrent, spec.gpus_per_worker = 0, 0.25
    with pytest.raises(ValueError, match="the cluster has 0 GPUs; a trial needs 0.25"):
        concurrency(spec)


class _InterruptedTuner:
    """A Tuner whose run gets Ctrl-C: Tune's own SIGINT handling, then a grid as Tune returns it."""

    def __init__(self, interrupt: bool) -> None:
        self.interrupt = interrupt

    def fit(self):
        import os
        import signal

        from ray.tune.tune import _setup_signal_catching

        _setup_signal_catching()
        if self.interrupt:
            os.kill(os.getpid(), signal.SIGINT)
        return "grid"


def test_ctrl_c_stops_the_sweep_instead_of_going_on_to_the_next_arm():
    import signal

    from hlgt.sweep.experiments import fit_unless_interrupted

    before = signal.getsignal(signal.SIGINT)
    assert fit_unless_interrupted(_InterruptedTuner(False), "full") == "grid"
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt, match="sweep interrupted in experiment full; re-run the same command"):
        fit_unless_interrupted(_InterruptedTuner(True), "full")
    assert signal.getsignal(signal.SIGINT) is before


def _one_arm_spec(tmp_path, max_failures: int) -> SweepSpec:
    return SweepSpec(name="retry", storage=str(tmp_path), base={}, arms=["full"], samples=[{}],
                     replicates=[{"data.fold": 0, "train.seed": 1}], scheduler="fifo", max_failures=max_failures)


def test_a_sweep_passes_max_failures_to_tune(tmp_path, monkeypatch):
    import ray
    import ray.tune

    from hlgt.sweep import experiments

    class Recorder:
        can_restore = staticmethod(lambda path: False)

        def __init__(self, trainable, **kwargs):
            self.kwargs = kwargs

    monkeypatch.setattr(ray.tune, "Tuner", Recorder)
    monkeypatch.setattr(experiments, "concurrency", lambda spec: 1)
    monkeypatch.setattr(experiments, "fit_unless_interrupted", lambda tuner, name: tuner)
    monkeypatch.setattr(experiments, "slots_actor", lambda spec, slots: None)
    monkeypatch.setattr(ray, "kill", lambda actor: None)
    tuner = experiments.run_experiment(_one_arm_spec(tmp_path, 3), "full", ["full"])
    assert tuner.kwargs["run_config"].failure_config.max_failures == 3


def _run_experiment_with(trainable, spec, monkeypatch):
    """``run_experiment`` on a local Ray with ``trainable`` (a function of this file) as its trials."""
    import ray
    import ray.cloudpickle

    from hlgt.ray_session import start_ray
    from hlgt.sweep import experiments

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setattr(experiments, "trial", trainable)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this file
    start_ray(cpus=2, dashboard=False, console=False)
    try:
        return experiments.run_experiment(spec, "full", ["full"])
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _fails_once(config, spec):
    """A trial whose first attempt dies, as one whose actor Ray cancelled while it started."""
    import ray.tune

    attempts = Path(spec.storage) / "attempts"
    before = int(attempts.read_text()) if attempts.exists() else 0
    attempts.write_text(str(before + 1))
    if before == 0:
        raise RuntimeError("the actor never ran")
    ray.tune.report({"epoch": 1, "val/value_acc": 0.5})


@pytest.mark.slow
def test_a_trial_that_fails_once_finishes_in_the_same_run(tmp_path, monkeypatch, capsys):
    grid = _run_experiment_with(_fails_once, _one_arm_spec(tmp_path, 1), monkeypatch)
    assert (tmp_path / "attempts").read_text() == "2"
    assert grid.num_errors == 0 and grid[0].metrics["val/value_acc"] == 0.5
    out = capsys.readouterr().out
    assert "failed (RuntimeError: the actor never ran); retry 1 of 1, from its last checkpoint" in out
    assert "FAILED" not in out


@pytest.mark.slow
def test_a_resume_says_the_limits_tune_keeps_from_the_first_start(tmp_path, monkeypatch):
    import ray
    import ray.tune

    from hlgt.sweep.experiments import restored_limits

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")

    def trainable(config):
        ray.tune.report({"x": 1})

    ray.init(num_cpus=1, include_dashboard=False)
    try:
        ray.tune.Tuner(trainable, param_space={"a": ray.tune.grid_search([1, 2])},
                       tune_config=ray.tune.TuneConfig(max_concurrent_trials=1),
                       run_config=ray.tune.RunConfig(name="e", storage_path=str(tmp_path), verbose=0,
                                                     failure_config=ray.tune.FailureConfig(max_failures=1))).fit()
        restored = ray.tune.Tuner.restore(str(tmp_path / "e"), trainable=trainable, resume_errored=True)
        assert restored_limits(restored, 4, 3) == ("at most 1 trial(s) at once (this run: 4); --max-failures 1 "
                                                   "(this run: 3)")
        assert restored_limits(restored, 1, 1) == ""  # the default scheduler, fifo
        ray.tune.Tuner(trainable, param_space={"a": ray.tune.grid_search([1])},
                       tune_config=ray.tune.TuneConfig(metric="x", mode="max",
                                                       scheduler=ray.tune.schedulers.ASHAScheduler(max_t=2)),
                       run_config=ray.tune.RunConfig(name="pooled", storage_path=str(tmp_path), verbose=0)).fit()
        restored = ray.tune.Tuner.restore(str(tmp_path / "pooled"), trainable=trainable)
        assert restored_limits(restored, 0, 0) == ("one AsyncHyperBandScheduler over every replicate (a sweep started "
                                                   "before schedulers ran per replicate)")
    finally:
        ray.shutdown()


def test_trial_slots_hold_trials_to_their_number_through_retries_and_free_a_dead_trials(monkeypatch):
    from hlgt.sweep import experiments

    now = [0.0]
    monkeypatch.setattr(experiments.time, "monotonic", lambda: now[0])
    slots = experiments.TrialSlots(2)
    assert slots.take("a") and slots.take("b") and not slots.take("c")
    assert slots.take("a")  # a retried trial keeps its slot
    slots.give_back("b")
    assert slots.take("c") and not slots.take("b")
    now[0] = experiments.SLOT_LEASE_S / 2
    assert slots.take("a")  # renewed
    now[0] = experiments.SLOT_LEASE_S + 1  # c died without giving its slot back
    assert slots.take("b") and not slots.take("d")


def _trains_in_a_slot(config, spec):
    """A trial that, while it trains, watches for another trial training (10 s at most)."""
    import time

    import ray.tune

    from hlgt.sweep import experiments

    here = Path(spec.storage)
    with experiments.trial_slot(spec, wait_s=0.2):
        (here / f"in{config['replicate']}").touch()
        seen = []
        for _ in range(50):
            seen = [p.name for p in here.glob("in*") if p.name != f"in{config['replicate']}"]
            if seen:
                break
            time.sleep(0.2)
        (here / f"in{config['replicate']}").unlink()
    (here / f"saw{config['replicate']}").write_text(" ".join(seen))
    ray.tune.report({"epoch": 1, "val/value_acc": 0.5})


@pytest.mark.slow
def test_trials_that_tune_starts_at_once_beyond_what_fits_train_one_after_another(tmp_path, monkeypatch):
    import ray.tune

    from hlgt.sweep import experiments

    monkeypatch.setattr(experiments, "concurrency", lambda spec: 1)
    # As a restored experiment does: Tune starts every unfinished trial, whatever its limit.
    tune_config = ray.tune.TuneConfig
    monkeypatch.setattr(ray.tune, "TuneConfig", lambda **kw: tune_config(**{**kw, "max_concurrent_trials": None}))
    spec = _one_arm_spec(tmp_path, 0)
    spec.replicates.append({"data.fold": 0, "train.seed": 2})
    grid = _run_experiment_with(_trains_in_a_slot, spec, monkeypatch)
    assert grid.num_errors == 0 and len(grid) == 2
    # Each trained alone: the second once the first gave its slot back.
    assert [(tmp_path / f"saw{r}").read_text() for r in (0, 1)] == ["", ""]


def test_a_second_sweep_of_a_running_name_is_refused_before_ray(tmp_path):
    from hlgt.sweep.spec import sole_sweep

    argv = ["--smoke-test", "--storage", str(tmp_path / "sweeps"), "--name", "busy"]
    spec = command.make_spec(command.build_parser().parse_args(argv))
    with sole_sweep(spec):
        for again in (argv, argv + ["--fresh"]):
            with pytest.raises(OSError, match=f"another sweep is running {spec.root}: let it finish, or give"):
                command.main(again)
    assert not Path(spec.root).exists()  # the running sweep's folder untouched


def test_a_re_run_of_other_settings_is_refused_naming_each_change(tmp_path):
    from hlgt.sweep.spec import check_same_sweep, remove_earlier, save_settings

    argv = ["--smoke-test", "--storage", str(tmp_path / "sweeps"), "--name", "same"]
    spec = command.make_spec(command.build_parser().parse_args(argv))
    check_same_sweep(spec)  # a new sweep
    save_settings(spec)
    again = command.make_spec(command.build_parser().parse_args(argv + ["--max-concurrent", "1", "--no-wandb"]))
    check_same_sweep(again)  # how it runs may change
    for extra, change in ((["--ablation", "gts"], r"sweep.arms \['full'\] -> \['full', 'gts'\]"),
                          (["--set", "train.epochs=3"], "train.epochs 24 -> 3"),
                          (["--num-samples", "2"], r"sweep.samples \[.*\] -> \[.*\]"),
                          (["--seeds", "1,2"], r"sweep.replicates \[.*\] -> \[.*\]"),
                          (["--scheduler", "fifo"], "sweep.scheduler 'asha' -> 'fifo'")):
        with pytest.raises(ValueError,
                           match=rf"{spec.root} holds a sweep of other settings \({change}\): --fresh starts"):
            command.main(argv + extra)
    with pytest.raises(ValueError, match=r"other settings \(train.workers 1 -> 2\)"):  # a batch per worker
        command.main(argv + ["--workers-per-trial", "2"])
    # A sweep.json written by older code: the worker count unrecorded, a key added since missing.
    saved = Path(spec.root) / "sweep.json"
    older = json.loads(saved.read_text())
    del older["train.workers"], older["model.comparison_init"]
    saved.write_text(json.dumps(older))
    check_same_sweep(again)
    remove_earlier(spec)  # --fresh: the earlier settings go with the sweep
    check_same_sweep(command.make_spec(command.build_parser().parse_args(argv + ["--ablation", "gts"])))


def test_a_trials_validation_is_its_best_models_even_when_tunes_history_starts_at_a_resume(tmp_path):
    from types import SimpleNamespace

    import pandas as pd

    # Killed after epoch 2 (its best, 60%) and resumed: Tune's history holds epochs 3-4 only.
    checkpoint = tmp_path / "train" / "full-s0-r0-x" / "checkpoint_4"
    (checkpoint / "best").mkdir(parents=True)
    (checkpoint / "best" / "run_config.json").write_text(json.dumps({"epoch": 2, "val/value_acc": 0.6}))
    resumed = SimpleNamespace(config={"arm": "full", "sample": 0, "replicate": 0}, error=None,
                              metrics={"checkpoint_path": str(checkpoint)},
                              metrics_dataframe=pd.DataFrame({"epoch": [3, 4], "val/value_acc": [0.3, 0.5]}))
    spec = SweepSpec(name="t", storage=str(tmp_path), base={}, arms=["full"], samples=[{}], replicates=[{}])
    (outcome,) = results.outcomes(spec, "full", [resumed])
    assert outcome.val_value_acc == 0.6 and outcome.checkpoint == str(checkpoint)


@pytest.mark.filterwarnings("error::UserWarning")  # a chart with no figure says so, not matplotlib
def test_failed_trials_are_counted_never_chosen_and_an_arm_without_one_finished_is_a_row(tmp_path):
    def trial(sample, val, error=None):
        return results.TrialOutcome(arm="full", sample=sample, replicate=0, val_value_acc=val,
                                    checkpoint=f"/c/{sample}", error=error)

    # A trial that failed after saving a better model is not chosen: its run did not finish.
    assert [t.sample for t in results.choose([trial(0, 0.5), trial(1, 0.9, "worker died")])] == [0]
    def outcomes(folds):
        return [results.TrialOutcome(arm="full", sample=s, replicate=r, val_value_acc=v, checkpoint="/c", error=None)
                for s, r, v in folds]

    # A configuration that lost folds does not compete on the ones it kept, even where it is ahead there.
    chosen = results.choose(outcomes([(0, 0, 0.80), (0, 1, 0.95), (0, 2, 0.95), (1, 0, 0.81)]))
    assert [(t.sample, t.replicate) for t in chosen] == [(0, 0), (0, 1), (0, 2)]
    # Configurations with as many replicates compare on those they share: 2 is ahead on folds 0 and 1.
    chosen = results.choose(outcomes([(0, 0, 0.7), (0, 1, 0.7), (0, 2, 0.99), (2, 0, 0.8), (2, 1, 0.8), (2, 3, 0.1)]))
    assert [t.sample for t in chosen] == [2, 2, 2]
    # Sharing none: never one fold's score against another's. 1 and 3 share folds 1 and 2 (3 ahead
    # there); 0's fold 0 is not weighed against them.
    chosen = results.choose(outcomes([(0, 0, 0.99), (1, 1, 0.5), (1, 2, 0.5), (3, 1, 0.6), (3, 2, 0.6),
                                      (0, 3, 0.99)]))
    assert [t.sample for t in chosen] == [3, 3]
    # Fold 0 is held by 0 and 2, who compete there: 2 ahead (0.9 against 0.1); 1 lacks it.
    chosen = results.choose(outcomes([(0, 0, 0.1), (0, 1, 0.1), (1, 1, 0.9), (1, 2, 0.9), (2, 0, 0.9),
                                      (2, 2, 0.9)]))
    assert [t.sample for t in chosen] == [2, 2]
    spec = SweepSpec(name="t", storage=str(tmp_path), base={"data.dataset": "sample"}, arms=["full"],
                samples=[{"model.heads": 4}, {"model.heads": 2}], replicates=[{"data.fold": 0, "train.seed": 1}])
    row, test = results.select_and_test(spec, "full", [trial(0, 0.5, "boom"), trial(1, math.nan, "boom")], None,
                                        tmp_path)
    assert test.n == 0 and row["replicates"] == []
    assert (row["config"], row["runs"], row["trials"], row["failed"], row["without_model"]) == (
        "no trial finished", 0, 2, 2, 0)
    assert math.isnan(row["test_value_acc_mean"]) and row["checkpoints"] == []
    paths = results.write_results(tmp_path, [row], "seeds", "t")
    assert "| full | no trial finished | - | - | - | 0 | 0 | 2 | 2 | 0 |" in paths["md"].read_text()
    assert "- none: no trial finished" in paths["md"].read_text()
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def test_bad_yaml_values_and_flags_are_one_line_errors_before_ray(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    for text, message in (("space: 3\n", "space must be a mapping of config keys, got 3"),
                          ("set: [1]\n", r"set must be a mapping of config keys, got \[1\]"),
                          ("ablation: 5\n", "ablation must be an arm name or a list of them, got 5"),
                          ("scheduler: foo\n", "scheduler must be one of asha, median, fifo, got 'foo'"),
                          ("space:\n  train.lr: {uniform: 5}\n", r"'train.lr' must be a list of values or \{uniform"),
                          ("space:\n  train.lr: {uniform: [a, b]}\n",
                           r"'train.lr' must be a list of values or \{uniform")):
        space.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            command.main(["--space", str(space), "--storage", str(tmp_path / "runs")])
    space.write_text("set: {1: 2, foo: 3}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"unknown config keys \[1, 'foo'\]"):
        command.main(["--space", str(space), "--storage", str(tmp_path / "runs")])
    space.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=f"{space} is not valid YAML: 'utf-8' codec"):
        command.main(["--space", str(space), "--storage", str(tmp_path / "runs")])
    space.write_text("space:\n  train.lr: {loguniform: [1e-4, 1e-2]}\n", encoding="utf-8")  # YAML's text numbers
    assert command.make_spec(command.build_parser().parse_args(["--space", str(space), "--storage", str(tmp_path)]))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=f"--storage {tmp_path / 'file'} is a file, not a folder"):
        command.main(["--storage", str(tmp_path / "file")])
    for flag, value, message in (("--cpus-per-worker", "-1", "must be > 0"), ("--cpus-per-worker", "0", "must be > 0"),
                                 ("--max-concurrent", "-3", "must be >= 0"),
                                 ("--workers-per-trial", "0", "must be >= 1")):
        with pytest.raises(SystemExit):
            command.build_parser().parse_args([flag, value])
        assert f"argument {flag}: {message}" in capsys.readouterr().err


def scored(ids, right, n_numbers=2):
    """Scored test problems: ``right`` the ids answered right."""
    from hlgt.train.evaluate import Scored

    return [Scored(id=i, text="", predicted="", gold="", predicted_prefix=[], gold_prefix=None, values=[],
                   answer=0.0, predicted_value=None, value_correct=i in right, equation_correct=False,
                   n_numbers=n_numbers, error=None) for i in ids]


def test_the_paper_tables_pool_the_folds_and_pair_each_arm_with_full():
    from hlgt.sweep import tables

    fold0, fold1 = [f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]
    tests = {
        "full": tables.ArmTest("full", {0: scored(fold0, set(fold0[:8]), 7), 1: scored(fold1, set(fold1[:9]))}),
        "no_line_graph": tables.ArmTest("no_line_graph", {0: scored(fold0, set(fold0[2:9]), 7),
                                                          1: scored(fold1, set(fold1[:6]))}),
        "parse_graph": tables.ArmTest("parse_graph", {0: scored(fold0, set(fold0[:8]), 7),
                                                      1: scored(fold1, set(fold1[:9]))}),
    }
    md = tables.tables_markdown(tests, "mawps", pooled_over="2 folds")
    # full: 17 / 20 right; no_line_graph 13 / 20: only it a8 (1), only full a0, a1, b6, b7, b8 (5).
    assert ("| HLGT w/o line graph | no_line_graph | 65.0 | 13 / 20 | 83.2 | -20.0 | -1.6 | 1 / 5 | 0.22 |"
            in md)
    assert "| HLGT (SRL + NC + line graph) | full | 85.0 | 17 / 20 | 84.8 |  |  |  |  |" in md
    assert "| Parse graph + NC | parse_graph | 85.0 | 17 / 20 | 82.9 | +0.0 | -1.9 | 0 / 0 | 1 |" in md
    rows = tables.table_rows(tests, "mawps")  # W&B's table: a cell per column, the replicates tested among them
    assert all(len(r) == len(tables.TABLE_COLUMNS) for r in rows)
    assert [dict(zip(tables.TABLE_COLUMNS, r))["replicates"] for r in rows] == [2, 2, 2]
    assert "### Table 2: graph construction" in md and "### Table 3: components" in md
    assert "Baseline" not in md  # no gts in this sweep
    assert "differ at all" not in md  # no table with three arms, and three arms in all
    # Table 4, pooled: full's problems counted once per bucket, each arm's accuracy over its own verdicts.
    assert "### Table 4: value accuracy (%) by number of quantities\n" in md
    assert "| >=7 | 10 | 50.0% | 80.0 | 70.0 | 80.0 |" in md and "| 2 | 10 | 50.0% | 90.0 | 60.0 | 90.0 |" in md
    assert "| <=1 | 0 | 0.0% | - | - | - |" in md
    assert tables.versus(tests["no_line_graph"], tests["full"]).n == 20
    assert tables.versus(tables.ArmTest("x", {3: []}), tests["full"]) is None  # no replicate in common
    math23k = tables.tables_markdown(tests, "math23k", pooled_over="1 seed")
    assert "| 77.8 |" in math23k and "paper's HLGT" in math23k
    # An arm with fold 0 alone (a sweep still running): its difference to full is on fold 0 (8 / 10).
    tests["no_aux_task"] = tables.ArmTest("no_aux_task", {0: scored(fold0, set(fold0[:7]), 7)})
    md = tables.tables_markdown(tests, "mawps", pooled_over="the folds finished so far (of 2)")
    # Its pooled figure is marked as over 1 of the 2 folds, the others' over both.
    assert "| HLGT w/o auxiliary task | no_aux_task | 70.0 (1 of 2) | 7 / 10 | 84.0 | -10.0 | -0.8 | 0 / 1 | 1 |" in md
    assert "(k of 2): the arm was tested on k of the 2 replicates" in md and "| full | 85.0 | 17 / 20 |" in md
    # Cochran's Q, on fold 0 (the replicate all tested): Table 3's three arms, then all four.
    assert ("Do these 3 arms differ at all? Cochran's Q on the 10 problems of the replicates all of them tested: "
            "Q = 0.5, df = 2, p = 0.78." in md)
    assert "Do the sweep's 4 arms differ at all? Cochran's Q on the 10 problems" in md
    assert "Q = 1.0, df = 3, p = 0.8." in md
    assert md.count("differ at all") == 2  # none under Table 2: parse_graph and full are two arms
    # A sweep whose arms all sit in Table 3 prints its test once, under that table.
    del tests["parse_graph"]
    tests["hgt"] = tables.ArmTest("hgt", {0: scored(fold0, set(fold0[1:8]), 7)})
    table3 = tables.tables_markdown(tests, "mawps", pooled_over="the folds finished so far (of 2)")
    assert "Do these 4 arms differ at all?" in table3 and table3.count("differ at all") == 1
    # Table 4 then counts fold 0 alone, for every arm: its 10 problems with 7 numbers.
    assert "### Table 4: value accuracy (%) by number of quantities on replicate(s) 0, those every arm tested" in md
    assert "| >=7 | 10 | 100.0% | 80.0 | 70.0 | 80.0 | 70.0 |" in md and "| 2 | 0 | 0.0% | - | - | - | - |" in md


def test_an_arm_trained_with_several_seeds_is_paired_with_itself_on_the_folds_both_seeds_tested():
    from hlgt.sweep import tables

    fold0, fold1 = [f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]
    replicates = [{"data.fold": f, "train.seed": s} for f in (0, 1) for s in (1, 2, 3)]  # as --folds 0,1 --seeds 1,2,3
    tests = {
        # full: seeds 1 and 2 on both folds, seed 3 on fold 0 only (still training on fold 1).
        "full": tables.ArmTest("full", {0: scored(fold0, set(fold0[:8])), 1: scored(fold0, set(fold0[1:9])),
                                        2: scored(fold0, set(fold0[:9])), 3: scored(fold1, set(fold1[:5])),
                                        4: scored(fold1, set(fold1[:7]))}),
        "gts": tables.ArmTest("gts", {0: scored(fold0, set(fold0[:6])), 3: scored(fold1, set(fold1[:6]))}),
    }
    pairs = {(p.arm, p.seeds): p for p in tables.seed_pairs(tests, replicates)}
    assert set(pairs) == {("full", (1, 2)), ("full", (1, 3)), ("full", (2, 3))}  # gts has one seed
    one_two = pairs["full", (1, 2)]
    # Fold 0: only seed 1 a0, only seed 2 a8; fold 1: only seed 2 b5, b6.
    assert one_two.folds == [0, 1] and (one_two.paired.n, one_two.paired.only_a, one_two.paired.only_b) == (20, 1, 3)
    assert pairs["full", (2, 3)].folds == [0] and pairs["full", (2, 3)].paired.n == 10
    md = tables.tables_markdown(tests, "mawps", pooled_over="6 runs", replicates=replicates)
    assert "### Training noise: each arm against itself with another seed" in md
    assert "| full | 1 / 2 | 0, 1 | 65.0 | 75.0 | +10.0 | 1 / 3 | 0.62 |" in md
    assert "| full | 1 / 3 | 0 | 80.0 | 90.0 | +10.0 | 0 / 1 | 1 |" in md
    assert md.index("Training noise") < md.index("Table 4")
    assert tables.seed_rows(tests, replicates)[0] == ["full", 1, 2, "0, 1", 0.65, 0.75, 20, 1, 3, 0.625]
    # One seed per fold (the tables run), or no folds given: no such section.
    assert "Training noise" not in tables.tables_markdown(tests, "mawps", pooled_over="6 runs")
    assert tables.seed_pairs(tests, [{"data.fold": f, "train.seed": 1} for f in range(5)]) == []
    math23k = [{"train.seed": s} for s in (1, 2)]
    assert tables.seed_pairs({"full": tables.ArmTest("full", {0: scored(fold0, {"a0"}), 1: scored(fold0, set())})},
                             math23k)[0].folds_text == "-"


def test_seeds_on_one_split_are_paired_by_problem():
    from hlgt.sweep import tables

    fold0 = [f"a{i}" for i in range(10)]
    # Replicates 0 and 1: seeds 1 and 2 on the same fold. full solves a0-a7 with both seeds; the
    # others a2-a7 (seed 1) and a2-a9 (seed 2): only full a0, a1 twice; only them a8, a9 once.
    tests = {arm: tables.ArmTest(arm, {0: scored(fold0, set(fold0[:8] if arm == "full" else fold0[2:8])),
                                       1: scored(fold0, set(fold0[:8] if arm == "full" else fold0[2:]))})
             for arm in ("full", "no_line_graph", "no_aux_task")}
    paired = tables.versus(tests["no_line_graph"], tests["full"])
    assert (paired.n, paired.only_a, paired.only_b, paired.repeats) == (20, 2, 4, True)
    # By problem: a0, a1 at -2, a8, a9 at +1: |sum| >= 2 in 12 of the 16 sign choices (pooled
    # counts, 2 / 4, would give McNemar's 0.69 as if 6 problems had split).
    assert paired.p == 12 / 16
    md = tables.tables_markdown(tests, "mawps", pooled_over="2 seeds")
    assert "| 2 / 4 | 0.75 |" in md and "the p takes each problem once" in md
    # By problem: Q over the 20 rows, its p by shuffling the arms per problem (exactly 0.8519 over
    # all (3!)^10 shuffles); the chi-square over the rows would give 0.51.
    # 10,000 draws of numpy's generator estimate it within about 0.004: the printed digits may differ
    # between numpy versions' streams.
    said = re.search(r"on the 20 problems of the replicates all of them tested \(10 distinct: the p by permutation "
                     r"by problem, 10,000 draws, each shuffling the arms alike in all of a problem's replicates\): "
                     r"Q = 1\.3, p = (0\.\d\d)\.", md)
    assert said and abs(float(said.group(1)) - 0.8519) <= 0.02, md


@pytest.mark.parametrize("kind", ["asha", "median"])
def test_the_scheduler_compares_configurations_on_the_same_replicate_only(kind):
    # One configuration on three seeds: a harder seed is no reason to stop it. Two configurations
    # on one seed: the worse is stopped, as before.
    from types import SimpleNamespace

    from hlgt.sweep.schedulers import ByReplicate, by_replicate, scheduler

    def run(sched, trials):
        controller = SimpleNamespace(get_live_trials=lambda: [])  # none waits for a pause
        sched.set_search_properties(M.VAL_VALUE_ACC, "max")
        for t in trials:
            sched.on_trial_add(controller, t)
        stopped = set()
        for epoch in range(1, 25):
            for t in trials:
                if t.trial_id not in stopped and sched.on_trial_result(
                        controller, t, {M.EPOCH: epoch, M.VAL_VALUE_ACC: t.score}) == "STOP":
                    stopped.add(t.trial_id)
        return stopped

    class Trial(SimpleNamespace):  # the median rule keys its records by trial
        __hash__ = object.__hash__

    def trials(*replicates_scores):
        return [Trial(trial_id=f"t{i}", config={"replicate": r}, score=s) for i, (r, s) in enumerate(replicates_scores)]

    seeds = [(0, 0.8), (1, 0.5), (2, 0.4), (0, 0.79), (1, 0.49), (2, 0.39)]
    assert run(scheduler(kind, 24), trials(*seeds))  # one pool: the harder seeds' trials stopped
    assert not run(by_replicate(kind, 24), trials(*seeds[:3]))
    assert run(by_replicate(kind, 24), trials(*seeds)) <= {"t3", "t4", "t5"}
    worse = run(by_replicate(kind, 24), trials((0, 0.8), (0, 0.5), (0, 0.7), (0, 0.6)))
    assert worse and "t0" not in worse
    assert isinstance(pickle.loads(pickle.dumps(by_replicate(kind, 24))), ByReplicate)  # Tune saves it


def test_arms_that_differ_beyond_every_shuffle_get_a_bound_not_the_floor_estimate():
    from hlgt.sweep import tables

    fold0 = [f"a{i}" for i in range(30)]
    tests = {arm: tables.ArmTest(arm, {r: scored(fold0, set(fold0[:solved])) for r in (0, 1)})
             for arm, solved in (("full", 30), ("no_line_graph", 5), ("no_aux_task", 0))}
    line = tables.differ_line(list(tests), tests)
    assert line.endswith("no draw reached Q: p < 0.0003.") and "(30 distinct" in line


def test_without_validation_every_finished_trial_is_chosen_and_tested_at_its_last_epoch():
    def trial(replicate, error=None):
        return results.TrialOutcome(arm="full", sample=0, replicate=replicate, val_value_acc=math.nan,
                                    checkpoint=f"/c/{replicate}", error=error)

    assert results.choose([trial(0), trial(1)]) == []  # with validation: none has a score
    assert [t.replicate for t in results.choose([trial(1), trial(0), trial(2, "boom")], validated=False)] == [0, 1]
    assert results.mean_std([math.nan, math.nan]) == (pytest.approx(math.nan, nan_ok=True),) * 2


def test_a_table_sweep_trains_one_configuration_per_arm_on_every_fold(tmp_path):
    args = command.build_parser().parse_args(
        ["--dataset", "mawps", "--mawps-folds", "graph2tree-1921", "--no-mawps-valid", "--ablation", "all",
         "--folds", "0,1,2,3,4", "--name", "paper-tables", "--storage", str(tmp_path)])
    spec = command.make_spec(args)
    assert spec.samples == [{}] and spec.scheduler == "fifo" and not spec.validated
    assert spec.arms[0] == "full" and set(spec.arms) == set(C.ABLATIONS) and len(spec.replicates) == 5
    flat = spec.trial_flat("rgat", 0, 4)
    assert (flat["data.mawps_folds"], flat["data.mawps_valid"], flat["data.fold"]) == ("graph2tree-1921", False, 4)
    assert C.Config.from_flat(flat).model.heads == 4 and flat["train.epochs"] == 30  # the paper's settings
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("argv, message", [
    (["--heads", "2,4"], "--heads asks for a search"),
    (["--num-samples", "2"], "--num-samples asks for a search"),
    (["--grid"], "--grid asks for a search"),
    (["--scheduler", "asha"], "the asha scheduler stops trials by their validation scores"),
])
def test_a_table_sweep_refuses_a_search_before_ray(tmp_path, argv, message):
    with pytest.raises(ValueError, match=message):
        command.main(["--dataset", "mawps", "--no-mawps-valid", "--storage", str(tmp_path), *argv])
    assert not any(tmp_path.iterdir())


def test_a_search_file_with_a_table_sweep_and_folds_of_another_dataset_are_refused(tmp_path, monkeypatch):
    space = tmp_path / "space.yaml"
    space.write_text("space:\n  model.heads: [2, 4]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"--space, {space}: space asks for a search"):
        command.main(["--dataset", "mawps", "--no-mawps-valid", "--space", str(space), "--storage", str(tmp_path)])
    with pytest.raises(ValueError, match="--folds 0,1: math23k has no folds"):
        command.main(["--dataset", "math23k", "--folds", "0,1", "--storage", str(tmp_path)])
    with pytest.raises(ValueError, match="can be false only for MAWPS"):
        command.main(["--dataset", "math23k", "--no-mawps-valid", "--storage", str(tmp_path)])
    # An arm that needs other shards than the sweep builds once per fold for every arm.
    monkeypatch.setitem(C.ABLATIONS, "small_vocab", {"data.min_word_freq": 5})
    with pytest.raises(ValueError, match="arm small_vocab sets data.min_word_freq, which the sweep's shards"):
        command.main(["--dataset", "mawps", "--ablation", "small_vocab", "--storage", str(tmp_path / "s")])
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("name", [".", "..", "../other", "a/b", "/abs"])
def test_a_name_that_is_no_folder_name_is_refused_before_anything_is_removed(tmp_path, name):
    from hlgt.sweep.spec import save_settings

    earlier = command.make_spec(command.build_parser().parse_args(
        ["--smoke-test", "--storage", str(tmp_path / "sweeps"), "--name", "earlier"]))
    save_settings(earlier)
    with pytest.raises(ValueError, match="is not a folder name"):
        command.main(["--smoke-test", "--storage", str(tmp_path / "sweeps"), "--name", name, "--fresh"])
    assert (Path(earlier.root) / "sweep.json").exists()


def test_fresh_removes_only_a_sweep_folder_the_project_made_and_only_once_the_shards_are_there(tmp_path):
    from hlgt.sweep.spec import remove_earlier, save_settings

    argv = ["--smoke-test", "--storage", str(tmp_path / "sweeps"), "--name", "s"]
    spec = command.make_spec(command.build_parser().parse_args(argv))
    save_settings(spec)
    with pytest.raises(FileNotFoundError, match="no manifest.json"):  # a bad --shards: nothing removed
        command.main(argv + ["--fresh", "--shards", str(tmp_path / "none")])
    assert (Path(spec.root) / "sweep.json").exists()
    hand_made = tmp_path / "sweeps" / "mine"
    hand_made.mkdir()
    (hand_made / "notes.txt").write_text("mine")
    mine = command.make_spec(command.build_parser().parse_args(argv[:-1] + ["mine"]))
    with pytest.raises(ValueError, match=rf"{hand_made} has no \.hlgt-folder file .*rm -r {hand_made}"):
        remove_earlier(mine)
    assert (hand_made / "notes.txt").exists()
    # A --so-far of the sweep writing its records: --fresh waits for nothing and removes nothing.
    from hlgt.storage import sole_writer

    with sole_writer(str(spec.so_far_dir), "a --so-far"):  # before it made its folder too
        with pytest.raises(OSError, match=f"a --so-far is writing {spec.so_far_dir}: let it finish"):
            remove_earlier(spec)
        spec.so_far_dir.mkdir()
        with pytest.raises(OSError, match=f"a --so-far is writing {spec.so_far_dir}: let it finish"):
            remove_earlier(spec)
    assert (Path(spec.root) / "sweep.json").exists()
    remove_earlier(spec)
    assert not Path(spec.root).exists()
    Path(spec.root).mkdir()  # an empty folder of that name: removed, no lock file left in it
    remove_earlier(spec)
    assert not Path(spec.root).exists()


def test_a_plan_beyond_max_trials_is_refused_before_it_is_enumerated(tmp_path, monkeypatch):
    argv = ["--storage", str(tmp_path / "sweeps"), "--dataset", "sample"]
    ten = ",".join(str(k) for k in range(1, 11))
    with pytest.raises(ValueError, match=r"the grid's 10,000 configurations x 1 trials each .* = 10,000 trials, "
                                         r"more than --max-trials 3,000"):
        command.make_spec(command.build_parser().parse_args(
            argv + ["--grid", "--heads", "1,2,4,8,16,32,64,128,256,512", "--layers", ten, "--lr", ten,
                    "--beta-com", ten]))
    # Twelve dimensions: 3^12 configurations, counted, never built.
    monkeypatch.setattr(space, "itertools", None)
    yaml = tmp_path / "space.yaml"
    yaml.write_text("space:\n" + "".join(f"  {k}: [1, 2, 3]\n" for k in (
        "model.heads", "model.layers", "model.beta_com", "train.lr", "model.hidden_size", "model.embedding_size",
        "model.beam_size", "model.max_output_len", "train.batch_size", "train.epochs", "train.lr_step",
        "train.eval_every")))
    with pytest.raises(ValueError, match="531,441 configurations"):
        command.make_spec(command.build_parser().parse_args(argv + ["--space", str(yaml), "--grid"]))
    # num_samples with a continuous dimension: refused before any draw; --max-trials raises the limit.
    draws = argv + ["--lr", "0.001,0.002", "--num-samples", "5000", "--seeds", "1,2"]
    yaml.write_text("space:\n  train.lr: {loguniform: [1.0e-4, 1.0e-2]}\nnum_samples: 5000\n")
    with pytest.raises(ValueError, match=r"num_samples 5,000 configurations x 2 trials each"):
        command.make_spec(command.build_parser().parse_args(argv + ["--space", str(yaml), "--seeds", "1,2"]))
    assert len(command.make_spec(command.build_parser().parse_args(draws)).samples) == 54  # all the space holds
    spec = command.make_spec(command.build_parser().parse_args(
        argv + ["--space", str(yaml), "--max-trials", "10000", "--no-reference", "--ablation", "gts"]))
    assert len(spec.samples) == 5000


def test_a_loguniform_bound_that_is_not_positive_names_its_key():
    with pytest.raises(ValueError, match=r"search space 'train.lr': loguniform bounds must be > 0"):
        space.sample_configs({"train.lr": {"loguniform": [0, 1e-2]}}, CENTRE, n=3)


def _finished_trial(spec, folder: str, flat: dict, val_value_acc: float, final: bool = True) -> Path:
    """A trial folder as a sweep's trial leaves it: a checkpoint with the config it trained, its
    best model and, when the run finished, results.json."""
    from hlgt.data.shards import load_vocab
    from hlgt.model.solver import Solver

    checkpoint = Path(spec.train_storage) / folder / "checkpoint_000000"
    cfg = C.Config.from_flat(flat)
    Solver(cfg.model, load_vocab(spec.shards[0])).save(checkpoint / "best")
    (checkpoint / "best" / "run_config.json").write_text(json.dumps({"config": cfg.to_flat(), "val/value_acc":
                                                                     val_value_acc}))
    (checkpoint / "config.json").write_text(json.dumps(cfg.to_flat()))
    if final:
        (checkpoint / "results.json").write_text(json.dumps({"epoch": 24, "best_epoch": 24}))
    return checkpoint


def test_so_far_counts_the_trials_the_scheduler_stopped_by_tunes_saved_state(tmp_path, monkeypatch):
    argv = ["--ablation", "no_line_graph", "--smoke-test", "--seeds", "1,2", "--name", "asha", "--storage",
            str(tmp_path / "sweeps"), "--set", f"data.shards_dir={tmp_path / 'processed'}", "--no-wandb"]
    spec = command.make_spec(command.build_parser().parse_args(argv))
    spec.shards = build_shards(spec)
    running = _finished_trial(spec, "full-s0-r0-a_00000", spec.trial_flat("full", 0, 0), 0.5, final=False)
    stopped = _finished_trial(spec, "full-s0-r1-a_00001", spec.trial_flat("full", 0, 1), 0.25, final=False)
    (Path(spec.train_storage) / "no_line_graph-s0-r0-a_00002").mkdir()  # stopped before its first checkpoint
    replaced = _finished_trial(spec, "no_line_graph-s0-r1-a_00003", spec.trial_flat("no_line_graph", 0, 1), 0.5,
                               final=False)
    # Tune's state names checkpoints where the storage was then (it has moved since: found by name).
    ended = {"full-s0-r1-a_00001": {"epoch": 6, "val/value_acc": 0.25,
                                    results.CHECKPOINT_PATH: f"/moved/full-s0-r1-a_00001/{stopped.name}"},
             "no_line_graph-s0-r0-a_00002": {"epoch": 1},
             "no_line_graph-s0-r1-a_00003": {"epoch": 2,
                                             results.CHECKPOINT_PATH: str(replaced.parent / "checkpoint_1")}}
    monkeypatch.setattr(results, "ended_by_tune", lambda spec, notes: (ended, set()))
    notes = []
    trials = results.finished_trials(spec, notes)
    assert [t.replicate for t in trials["full"]] == [1]  # replicate 0 still trains
    (full,), (no_model, gone) = trials["full"], trials["no_line_graph"]
    assert (full.checkpoint, full.epochs, full.val_value_acc) == (str(stopped), 6, 0.25)
    assert (no_model.checkpoint, no_model.epochs, math.isnan(no_model.val_value_acc)) == (None, 1, True)
    # The checkpoint it reported replaced since (Ray Train keeps the latest): no model, said.
    assert (gone.replicate, gone.checkpoint, gone.epochs) == (1, None, 2)
    assert len(notes) == 1 and "the checkpoint the scheduler's last result names is gone" in notes[0]
    assert running.is_dir() and "full-s0-r0-a_00000" not in ended
    # Tested as they were, as the sweep's own tables test them: one replicate stopped early, others without a model.
    rows = {r["arm"]: r for r in results.report_so_far(spec)[0]}
    assert (rows["full"]["runs"], rows["full"]["stopped_early"]) == (1, 1)
    assert (rows["no_line_graph"]["runs"], rows["no_line_graph"]["without_model"]) == (0, 2)
    # A trial that failed past its retries (Tune's state: ERROR) is counted failed, not still training.
    monkeypatch.setattr(results, "ended_by_tune", lambda spec, notes: (ended, {"full-s0-r0-a_00000"}))
    failed = [t for t in results.finished_trials(spec, [])["full"] if t.replicate == 0]
    assert len(failed) == 1 and failed[0].checkpoint is None and "failed past its retries" in failed[0].error
    rows = {r["arm"]: r for r in results.report_so_far(spec)[0]}
    assert (rows["full"]["failed"], rows["full"]["trials"]) == (1, 2)


@pytest.mark.slow
@pytest.mark.ray
def test_tunes_saved_state_names_the_trials_it_ended(tmp_path, monkeypatch):
    import ray
    import ray.tune

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    spec = SweepSpec(name="t", storage=str(tmp_path), base={"data.dataset": "sample"}, arms=["full", "no_aux_task"],
                     samples=[{"model.heads": 4}], replicates=[{"data.fold": 0, "train.seed": 1}], wandb=False)

    from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY

    assert results.CHECKPOINT_PATH == CHECKPOINT_PATH_KEY  # the key TuneReportCallback adds

    def trial(config):  # ended by the stop condition after its first report, as a scheduler ends one
        if config["replicate"] == 1:
            raise RuntimeError("a failed trial: ERROR in Tune's state, resumed by a re-run")
        ray.tune.report({"epoch": 1, "val/value_acc": 0.5, results.CHECKPOINT_PATH: "/c/checkpoint_1"})
        ray.tune.report({"epoch": 2, "val/value_acc": 0.6, results.CHECKPOINT_PATH: "/c/checkpoint_2"})

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        name = lambda t: f"full-s0-r{t.config['replicate']}-xyz"  # noqa: E731
        ray.tune.Tuner(trial, param_space={"replicate": ray.tune.grid_search([0, 1])},
                       tune_config=ray.tune.TuneConfig(trial_name_creator=name, trial_dirname_creator=name),
                       run_config=ray.tune.RunConfig(name="full", storage_path=spec.root, stop={"epoch": 1},
                                                     verbose=0)).fit()
    finally:
        ray.shutdown()
    (Path(spec.root) / "no_aux_task").mkdir()  # an experiment that has not saved its state yet
    notes = []
    ended, failed = results.ended_by_tune(spec, notes)
    assert ended.keys() == {"full-s0-r0-xyz"} and ended["full-s0-r0-xyz"]["epoch"] == 1
    assert ended["full-s0-r0-xyz"][results.CHECKPOINT_PATH] == "/c/checkpoint_1"
    assert failed == {"full-s0-r1-xyz"} and notes == []
    spec.scheduler = "fifo"  # no scheduler stops trials: failures only
    assert results.ended_by_tune(spec, notes) == ({}, {"full-s0-r1-xyz"})
    state = next((Path(spec.root) / "full").glob("experiment_state-*.json"))
    state.write_text(state.read_text()[:100])  # caught mid-write
    assert results.ended_by_tune(spec, notes) == ({}, set()) and "full: Tune's state unreadable" in notes[0]


def test_on_uri_storage_the_results_are_copied_beside_the_trials(tmp_path, monkeypatch, capsys):
    # On S3 the results are written into the job's working directory, which goes with the cluster;
    # a file:// URI takes the same path through pyarrow's filesystems.
    monkeypatch.chdir(tmp_path)
    spec = SweepSpec(name="t", storage=f"file://{tmp_path}/bucket", base={"data.dataset": "sample"}, arms=["full"],
                     samples=[{"model.heads": 4}], replicates=[{"data.fold": 0, "train.seed": 1}], wandb=False)
    failed = results.TrialOutcome(arm="full", sample=0, replicate=0, val_value_acc=math.nan, checkpoint=None,
                                  error="boom")
    (spec.local_dir / ".lock").parent.mkdir(parents=True)
    (spec.local_dir / ".lock").write_text("")
    _, _, paths = results.summarise(spec, {"full": [failed]})
    copy = tmp_path / "bucket" / "t" / "results"
    assert paths["md"].parent.resolve() == (tmp_path / "runs" / "sweeps" / "t").resolve()
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in paths.values())
    assert (copy / "results.md").read_text() == paths["md"].read_text()
    _, _, so_far = results.summarise(spec, {"full": [failed]}, so_far="so far: 0 of 1 trials finished")
    assert (copy / "so-far" / "results.md").read_text() == so_far["md"].read_text()
    assert f"to file://{tmp_path}/bucket/t/results/so-far" in capsys.readouterr().out
    # A copy that fails is said; the tables stand.
    monkeypatch.setattr(results.storage, "copy_folder", lambda *a: (_ for _ in ()).throw(PermissionError("denied")))
    _, _, paths = results.summarise(spec, {"full": [failed]})
    out = capsys.readouterr().out
    assert f"could not copy {spec.local_dir} to file://{tmp_path}/bucket/t/results (denied): the results" in out
    assert paths["md"].exists()


def test_so_far_tables_the_finished_trials_without_ray_and_leaves_the_sweep_alone(tmp_path, monkeypatch, capsys):
    from hlgt.sweep import experiments
    from hlgt.sweep.spec import save_settings
    from hlgt.train import evaluate as E

    monkeypatch.setattr(experiments, "start_ray", lambda *a, **k: pytest.fail("--so-far started Ray"))
    argv = ["--ablation", "no_line_graph", "--smoke-test", "--seeds", "1,2", "--name", "long", "--storage",
            str(tmp_path / "sweeps"), "--set", f"data.shards_dir={tmp_path / 'processed'}", "--no-wandb"]
    with pytest.raises(ValueError, match="holds no sweep: give the --name and --storage of one that has started"):
        command.main(argv + ["--so-far"])
    spec = command.make_spec(command.build_parser().parse_args(argv))
    spec.shards = build_shards(spec)
    save_settings(spec)
    done = _finished_trial(spec, "full-s0-r1-a_00001", spec.trial_flat("full", 0, 1), 0.25)
    _finished_trial(spec, "no_line_graph-s0-r0-a_00002", spec.trial_flat("no_line_graph", 0, 0), 0.5, final=False)
    _finished_trial(spec, "full-s0-r0-old_00000", {**spec.trial_flat("full", 0, 0), "model.heads": 8}, 0.5)
    _finished_trial(spec, "full-s0-r0-b_00003", spec.trial_flat("full", 0, 0), 0.75)
    (Path(spec.train_storage) / "notes").mkdir()
    before = sorted(p for p in Path(spec.root).rglob("*"))

    assert command.main(argv + ["--so-far"]) == 0
    out = capsys.readouterr().out
    report = spec.so_far_dir / "results.md"
    assert "## long (so far: 2 of 4 trials finished)" in report.read_text()
    rows = {r["arm"]: r for r in json.loads((spec.so_far_dir / "results.json").read_text())}
    assert rows["full"]["runs"] == 2 and [r["replicate"] for r in rows["full"]["replicates"]] == [0, 1]
    assert rows["full"]["val_value_acc_mean"] == 0.5 and rows["no_line_graph"]["runs"] == 0
    # Seeds 1 and 2 of full, paired on fold 0's test problems: the training noise section.
    assert re.search(r"\| full \| 1 / 2 \| 0 \| [\d.]+ \| [\d.]+ \| [+-][\d.]+ \| \d+ / \d+ \|", report.read_text())
    assert "| full |" in out and "the seeds finished so far (of 2)" in out
    assert "full-s0-r0-old_00000: trained other settings than the sweep's (model.heads 8 -> 4)" in out
    tested = spec.so_far_dir / "best" / "full" / "replicate1"
    assert (tested / "checkpoint.txt").read_text() == str(done)
    predictions = (tested / "predictions_test.jsonl").read_text()
    # The sweep's own files are as they were; its results table is not written.
    assert sorted(p for p in Path(spec.root).rglob("*") if spec.so_far_dir not in p.parents
                  and p != spec.so_far_dir and p.name != ".so-far.lock") == before
    assert not (Path(spec.root) / "results.md").exists()

    # Again: the model already tested is read back, not tested again.
    monkeypatch.setattr(E, "evaluate", lambda *a, **k: pytest.fail("tested twice"))
    assert command.main(argv + ["--so-far"]) == 0
    assert (tested / "predictions_test.jsonl").read_text() == predictions
    assert json.loads((spec.so_far_dir / "results.json").read_text())[0]["test_value_acc_mean"] == \
        rows["full"]["test_value_acc_mean"]
    with pytest.raises(ValueError, match="--so-far reports on a sweep as it is"):
        command.main(argv + ["--so-far", "--fresh"])

    # The storage lost, the records kept (so-far/best/): the tested trials stand as they were, and
    # a sweep re-run on the same records does not train them again.
    shutil.rmtree(spec.train_storage)
    assert command.main(argv + ["--so-far"]) == 0
    assert "(so far: 2 of 4 trials finished)" in report.read_text()
    again = {r["arm"]: r for r in json.loads((spec.so_far_dir / "results.json").read_text())}
    assert again["full"]["test_value_acc_mean"] == rows["full"]["test_value_acc_mean"]
    assert again["full"]["runs"] == 2 and "only the test predictions were kept" in again["full"]["checkpoints"][0]
    notes: list[str] = []
    spec.recorded = results.recorded_trials(spec, notes)
    assert sorted(spec.recorded) == [("full", 0, 0), ("full", 0, 1)] and not notes
    monkeypatch.setattr(experiments.launch, "fit", lambda *a, **k: pytest.fail("a recorded trial trained again"))
    reported = []
    monkeypatch.setattr("ray.tune.report", reported.append)
    experiments.trial({"arm": "full", "sample": 0, "replicate": 1}, spec)
    assert reported == [{"epoch": 24, "val/value_acc": 0.25}]
    skipped = results.TrialOutcome("full", 0, 1, float("nan"), checkpoint=None, error=None)  # Tune's, of the skip
    assert results.with_records(spec, [skipped]) == [spec.recorded[("full", 0, 1)]]
    # The sweep's own results: the record's predictions, copied beside the others.
    results.evaluate_on_test(spec, spec.recorded[("full", 0, 1)], None, spec.local_dir)
    assert (spec.local_dir / "best" / "full" / "replicate1" / "predictions_test.jsonl").read_text() == predictions
    # A record of other settings is passed over, and said.
    record = results.record_dir(spec, "full", 0) / results.RECORD_FILE
    changed = json.loads(record.read_text())
    changed["config"]["model.heads"] = 8
    record.write_text(json.dumps(changed))
    notes = []
    assert sorted(results.recorded_trials(spec, notes)) == [("full", 0, 1)]
    assert "a trial record of other settings than the sweep's (model.heads 8 -> 4)" in notes[0]


def test_chart_range_shows_the_figures_with_a_margin_on_multiples_of_five():
    assert results.chart_range([84.3, 85.7, 82.6, float("nan")]) == (80.0, 90.0)
    assert results.chart_range([1.0, 99.5]) == (0.0, 100.0)  # within 0-100
    assert results.chart_range([100.0, 100.0]) == (95.0, 100.0)  # never an empty axis
    assert results.chart_range([float("nan")]) == (0.0, 100.0)  # nothing to show


def test_a_sweep_holds_its_shards_while_its_trials_read_them(tmp_path, monkeypatch):
    from hlgt.data.build import ensure_shards
    from hlgt.storage import not_being_read

    argv = ["--smoke-test", "--storage", str(tmp_path / "sweeps")]
    spec = command.make_spec(command.build_parser().parse_args(argv))
    folder = ensure_shards(spec.centre.override({"data.shards_dir": str(tmp_path / "elsewhere")}))
    held = []

    def sweep_while_a_rebuild_is_tried(spec, address=None):
        with pytest.raises(OSError, match="refused"):
            with not_being_read(folder, "refused"):
                pass
        held.append(spec.shards)
        return [{"runs": [1]}]

    monkeypatch.setattr(command, "run_sweep", sweep_while_a_rebuild_is_tried)
    assert command.main([*argv, "--shards", str(folder)]) == 0 and held
    with not_being_read(folder, "still held"):  # the hold ended with the sweep
        pass

    def tables_while_a_rebuild_is_tried(spec):  # --so-far reads the test rows too
        sweep_while_a_rebuild_is_tried(spec)
        return [], "", {}, []

    monkeypatch.setattr(command, "check_same_sweep", lambda spec, must_exist=False: None)
    monkeypatch.setattr(command, "report_so_far", tables_while_a_rebuild_is_tried)
    monkeypatch.setattr(command, "results_markdown", lambda rows, kind: "")
    assert command.main([*argv, "--shards", str(folder), "--so-far"]) == 0 and len(held) == 2


def test_a_trials_run_leaves_retries_to_tune(tmp_path, monkeypatch):
    """Tune retries a failed trial --max-failures times, each resuming its run: the run itself
    retries nothing, or a failure that repeats would run (max_failures + 1)^2 times."""
    import contextlib

    import ray.tune

    from hlgt.sweep import experiments

    argv = ["--smoke-test", "--storage", str(tmp_path / "sweeps"), "--max-failures", "3"]
    spec = command.make_spec(command.build_parser().parse_args(argv))
    spec.shards = {0: str(tmp_path / "shards")}
    fits = []
    monkeypatch.setattr(experiments.launch, "fit", lambda cfg, shards, **kw: fits.append(kw))
    monkeypatch.setattr(experiments, "trial_slot", lambda spec: contextlib.nullcontext())
    monkeypatch.setattr(ray.tune, "get_context", lambda: type("Context", (), {"get_trial_name": lambda self: "t"})())
    monkeypatch.setattr("ray.tune.integration.ray_train.TuneReportCallback", lambda: "callback")
    experiments.trial({"arm": "full", "sample": 0, "replicate": 0}, spec)
    assert spec.max_failures == 3 and [kw["max_failures"] for kw in fits] == [0]


def test_the_sweep_console_shows_validation_only_where_an_epoch_validated(capsys):
    from hlgt.sweep.experiments import epoch_lines

    lines = epoch_lines(validated=True)
    carried = {M.EPOCH: 2, M.TRAIN_LOSS: 1.0, M.TRAIN_PROBLEMS_PER_S: 9.0, M.VAL_VALUE_ACC: 0.4}
    lines.on_trial_result(0, [], "full_0", carried)
    lines.on_trial_result(0, [], "full_0", {**carried, M.EPOCH: 3, M.VAL_TREE_LOSS: 0.5})
    out = capsys.readouterr().out.splitlines()
    assert out == ["[sweep] full_0 epoch 2 | loss 1.0000 | 9.0 problems/s",
                   "[sweep] full_0 epoch 3 | loss 1.0000 | val value 40.0% | 9.0 problems/s"]


def test_a_chosen_replicate_stopped_before_its_last_epoch_is_counted(tmp_path):
    """ASHA stops a replicate of the best configuration early, or a time budget does: its model is
    tested with the others, and the table says how many were short of their epochs."""
    from hlgt.train.evaluate import write_predictions

    spec = SweepSpec(name="t", storage=str(tmp_path), base={"data.dataset": "sample", "train.epochs": 4},
                     arms=["full"], samples=[{"model.heads": 4}],
                     replicates=[{"data.fold": 0, "train.seed": s} for s in (1, 2)])
    trials = []
    for replicate, epochs in ((0, 4), (1, 2)):
        record = tmp_path / f"record{replicate}"
        record.mkdir()
        write_predictions(record / "predictions_test.jsonl", scored(["a", "b"], {"a"}))
        (record / "checkpoint.txt").write_text(f"/c/{replicate}", encoding="utf-8")
        (record / results.RECORD_FILE).write_text("{}", encoding="utf-8")
        trials.append(results.TrialOutcome(arm="full", sample=0, replicate=replicate, val_value_acc=0.5,
                                           checkpoint=f"/c/{replicate}", error=None, record=record, epochs=epochs))
    trials.append(results.TrialOutcome(arm="full", sample=0, replicate=1, val_value_acc=math.nan, checkpoint=None,
                                       error=None))  # left no model
    row, _ = results.select_and_test(spec, "full", trials, None, tmp_path / "out")
    assert (row["runs"], row["stopped_early"], row["epochs_unknown"], row["trials"], row["without_model"]) == (
        2, 1, 0, 3, 1)
    assert [r["epochs"] for r in row["replicates"]] == [4, 2]
    assert "| 2 | 1 | 3 | 0 | 1 |" in results.results_markdown([row], "seeds")
    # A record written before epochs were kept: not counted as stopped, said to be unknown.
    trials[1].epochs = None
    row, _ = results.select_and_test(spec, "full", trials, None, tmp_path / "out")
    assert "| 2 | 0 (1 unknown) | 3 | 0 | 1 |" in results.results_markdown([row], "seeds")

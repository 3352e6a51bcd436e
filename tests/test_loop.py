"""The training loop in one process on the sample data: checkpoint, reload, resume, outputs."""
import json
import re
import shutil

import pytest

from hlgt import metrics as M
from hlgt.config import Config
from hlgt.train import checkpoint, loop, step

TINY = {"data.dataset": "sample", "train.epochs": 2, "train.lr_step": 1, "train.batch_size": 16,
        "model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1,
        "model.beam_size": 2, "model.max_output_len": 16, "train.wandb": False, "train.threads": 1}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from hlgt.data.build import ensure_shards

    return ensure_shards(Config.from_flat({**TINY, "data.shards_dir": str(tmp_path_factory.mktemp("processed"))}))


def tiny(**flat) -> Config:
    return Config.from_flat({**TINY, **flat})


class Interrupt(Exception):
    pass


def test_two_epochs_write_a_checkpoint_that_reloads(shards, tmp_path):
    from hlgt.data.shards import load_rows, load_vocab
    from hlgt.model.solver import Solver

    run = tmp_path / "run"
    result = loop.train(tiny(), shards, run_dir=run)

    assert [m[M.EPOCH] for m in result.history] == [1, 2]
    for m in result.history:
        assert m[M.TRAIN_LOSS] > 0 and 0.0 <= m[M.VAL_VALUE_ACC] <= 1.0 and m[M.TRAIN_PROBLEMS_PER_S] > 0
        # Per-part gradient norms (each at most the global one) and activation scales, every epoch.
        parts = [m[M.grad_norm_metric(p)] for p in M.MODEL_PARTS]
        assert all(0 < n <= m[M.TRAIN_GRAD_NORM_MAX] * (1 + 1e-6) for n in parts)
        assert m[M.TRAIN_GRAD_NORM_MAX] <= (sum(n * n for n in parts) ** 0.5) * (1 + 1e-6)
        assert all(m[M.scale_metric(a)] > 0 for a in M.ACTIVATIONS)
        assert m[M.VAL_TREE_LOSS] > 0  # teacher-forced on validation, every evaluated epoch
    assert result.history[1][M.LR] == pytest.approx(0.5 * result.history[0][M.LR])  # StepLR(1, 0.5)
    assert set(result.metrics) >= {M.VAL_VALUE_ACC, M.TEST_VALUE_ACC, M.TEST_EQUATION_ACC, M.EPOCH}
    assert result.metrics[M.EPOCH] == 2

    state = checkpoint.read_checkpoint(run / "checkpoint")  # torch.load(weights_only=True)
    assert state["epoch"] == 2 and state["finished"] and state["starts"] == [0]
    assert {"optimizer", "scheduler", "history", "best_epoch"} <= set(state)
    flat = json.loads((run / "checkpoint" / "config.json").read_text())
    assert Config.from_flat(flat) == tiny()

    # The published model folder reloads on its own and decodes.
    best = Solver.load(run / "best")
    assert json.loads((run / "best" / "run_config.json").read_text())["config"] == tiny().to_flat()
    assert best.vocab.to_dict() == load_vocab(shards).to_dict()
    # So does the last epoch's, in the checkpoint.
    last = json.loads((run / "checkpoint" / "model" / "run_config.json").read_text())
    assert last == {"config": tiny().to_flat(), "epoch": 2}
    assert Solver.load(run / "checkpoint" / "model").vocab.to_dict() == best.vocab.to_dict()
    # Outputs: predictions of the best model, Table-4 tables, results.
    lines = (run / "predictions_test.jsonl").read_text().splitlines()
    assert len(lines) == 10 and {"id", "predicted", "gold", "value_correct"} <= set(json.loads(lines[0]))
    assert (run / "numbers_test.md").read_text().count("|") > 30
    assert json.loads((run / "results.json").read_text()) == result.metrics
    metrics_log = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m.get(M.EPOCH) for m in metrics_log] == [1, 2, 2]  # two epochs, then the final report
    assert metrics_log[0][M.grad_norm_metric("graph")] == result.history[0][M.grad_norm_metric("graph")]
    trained = len(load_rows(shards, "train"))  # every training problem, each epoch
    assert [m[M.TRAIN_PROBLEMS] for m in metrics_log[:2]] == [trained, trained]


def test_the_gts_arm_reports_its_own_parts(shards, tmp_path, capsys):
    result = loop.train(tiny(**{"model.encoder": "none", "model.aux_task": False, "train.epochs": 1}), shards,
                        run_dir=tmp_path / "r", evaluate_test=False)
    m = result.history[0]
    assert {p for p in M.MODEL_PARTS if M.grad_norm_metric(p) in m} == {"embedding", "word_gru", "decoder"}
    assert {a for a in M.ACTIVATIONS if M.scale_metric(a) in m} == {"h_b", "memory"}
    assert m[M.scale_metric("h_b")] == m[M.scale_metric("memory")]  # the GTS memory is h_b
    assert "grad norm max by part: embedding" in capsys.readouterr().out


def test_interrupted_run_resumes_to_the_same_result(shards, tmp_path):
    cfg = tiny(**{"train.epochs": 3})
    straight = loop.train(cfg, shards, run_dir=tmp_path / "straight")

    reporter = checkpoint.LocalReporter(tmp_path / "resumed")

    def report_then_die(metrics, checkpoint_dir):
        reporter(metrics, checkpoint_dir)
        if metrics[M.EPOCH] == 1:
            raise Interrupt  # killed right after its first checkpoint

    with pytest.raises(Interrupt):
        loop.train(cfg, shards, report=report_then_die)
    assert checkpoint.read_checkpoint(reporter.checkpoint)["epoch"] == 1
    resumed = loop.train(cfg, shards, run_dir=tmp_path / "resumed", resume_from=reporter.checkpoint)

    assert checkpoint.read_checkpoint(tmp_path / "resumed" / "checkpoint")["starts"] == [0, 1]
    assert [m[M.EPOCH] for m in resumed.history] == [1, 2, 3]
    # Same data order, restored optimizer, scheduler and RNG: the same training, epoch for epoch.
    for a, b in zip(straight.history, resumed.history):
        assert a[M.TRAIN_LOSS] == pytest.approx(b[M.TRAIN_LOSS], rel=1e-5)
        assert a[M.LR] == b[M.LR]
    assert resumed.metrics[M.TEST_VALUE_ACC] == pytest.approx(straight.metrics[M.TEST_VALUE_ACC])

    # A finished run re-run returns its results without training again.
    again = loop.train(cfg, shards, run_dir=tmp_path / "resumed", resume_from=tmp_path / "resumed" / "checkpoint")
    assert again.metrics == resumed.metrics and len(again.history) == 3


def _logged_epochs(run):
    return [json.loads(line)[M.EPOCH] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_kill_between_the_checkpoint_renames_resumes_from_the_old_copy(shards, tmp_path):
    cfg = tiny(**{"train.epochs": 2})
    reporter = checkpoint.LocalReporter(tmp_path / "r")

    def report_then_die(metrics, checkpoint_dir):
        reporter(metrics, checkpoint_dir)
        if metrics[M.EPOCH] == 1:
            raise Interrupt

    with pytest.raises(Interrupt):
        loop.train(cfg, shards, report=report_then_die)
    reporter.checkpoint.rename(tmp_path / "r" / ".checkpoint.old")  # killed after the first rename
    latest = checkpoint.LocalReporter(tmp_path / "r").latest()
    assert latest == reporter.checkpoint and checkpoint.read_checkpoint(latest)["epoch"] == 1
    resumed = loop.train(cfg, shards, run_dir=tmp_path / "r", resume_from=latest)
    assert checkpoint.read_checkpoint(latest)["starts"] == [0, 1] and len(resumed.history) == 2
    assert _logged_epochs(tmp_path / "r") == [1, 2, 2]  # each epoch once, then the final (test) report
    loop.train(cfg, shards, run_dir=tmp_path / "r")  # --fresh over the same folder
    assert _logged_epochs(tmp_path / "r") == [1, 2, 2]
    assert checkpoint.LocalReporter(tmp_path / "empty").latest() is None


def test_a_finished_run_rerun_restores_its_outputs(shards, tmp_path):
    run = tmp_path / "r"
    done = loop.train(tiny(**{"train.epochs": 1}), shards, run_dir=run)
    shutil.rmtree(run / "best")  # killed after the final checkpoint, before the outputs were copied
    again = loop.train(tiny(**{"train.epochs": 1}), shards, run_dir=run, resume_from=run / "checkpoint")
    assert again.metrics == done.metrics and (run / "best" / "model.pt").is_file()


def test_sweep_trials_leave_test_alone(shards, tmp_path):
    result = loop.train(tiny(**{"train.epochs": 1}), shards, run_dir=tmp_path / "r", evaluate_test=False)
    assert M.TEST_VALUE_ACC not in result.metrics and M.VAL_VALUE_ACC in result.metrics
    assert not (tmp_path / "r" / "predictions_test.jsonl").exists()
    assert (tmp_path / "r" / "predictions_valid.jsonl").exists()


def test_time_budget_stops_after_the_epoch_that_crosses_it_and_a_rerun_goes_on(shards, tmp_path):
    run = tmp_path / "r"
    result = loop.train(tiny(**{"train.epochs": 5, "train.max_minutes": 1e-6}), shards, run_dir=run)
    assert [m[M.EPOCH] for m in result.history] == [1]
    assert result.metrics[M.EPOCH] == 1 and M.TEST_VALUE_ACC in result.metrics
    assert (run / "results.json").is_file() and not checkpoint.read_checkpoint(run / "checkpoint")["finished"]
    # The next call of the schedule (another budget, or none) trains from epoch 2 on.
    later = loop.train(tiny(**{"train.epochs": 5, "train.max_minutes": 1e-6}), shards, run_dir=run,
                       resume_from=run / "checkpoint")
    assert [m[M.EPOCH] for m in later.history] == [1, 2] and later.metrics[M.EPOCH] == 2
    rest = loop.train(tiny(**{"train.epochs": 5}), shards, run_dir=run, resume_from=run / "checkpoint")
    assert [m[M.EPOCH] for m in rest.history] == [1, 2, 3, 4, 5]
    state = checkpoint.read_checkpoint(run / "checkpoint")
    assert state["finished"] and state["starts"] == [0, 1, 2]
    assert _logged_epochs(run) == [1, 1, 2, 2, 3, 4, 5, 5]  # each epoch once, each stop's test report after it


def test_a_schedule_stopped_by_its_time_budget_keeps_the_model_one_call_would(shards, tmp_path, monkeypatch):
    # The stop's epoch is validated for its report; were it a candidate for best, a schedule over
    # several calls could keep a model that one call through it never keeps (here epoch 2's 0.9).
    from types import SimpleNamespace

    scores = {1: 0.1, 2: 0.9, 3: 0.5}

    def scripted(self):
        score = scores[self.state["epoch"] + 1]
        return SimpleNamespace(value_acc=score, equation_acc=score)

    monkeypatch.setattr(loop.Trainer, "validation_report", scripted)
    cfg = {"train.epochs": 3, "train.eval_every": 3}
    straight = loop.train(tiny(**cfg), shards, run_dir=tmp_path / "a")
    loop.train(tiny(**cfg, **{"train.max_minutes": 1e-6}), shards, run_dir=tmp_path / "b")
    stopped = loop.train(tiny(**cfg, **{"train.max_minutes": 1e-6}), shards, run_dir=tmp_path / "b",
                         resume_from=tmp_path / "b" / "checkpoint")
    assert stopped.metrics[M.EPOCH] == 2 and stopped.history[1][M.VAL_VALUE_ACC] == 0.9  # reported
    resumed = loop.train(tiny(**cfg), shards, run_dir=tmp_path / "b", resume_from=tmp_path / "b" / "checkpoint")
    assert straight.metrics[M.BEST_EPOCH] == resumed.metrics[M.BEST_EPOCH] == 3
    assert [m[M.VAL_VALUE_ACC] for m in resumed.history] == [0.1, 0.9, 0.5]
    assert [m[M.VAL_VALUE_ACC] for m in straight.history] == [0.1, 0.1, 0.5]


def test_report_is_required(shards):
    with pytest.raises(ValueError, match="report"):
        loop.train(tiny(), shards)


def test_train_command_config_and_run_name(capsys):
    from hlgt.commands.train import build_parser, make_config, run_name

    args = build_parser().parse_args(["--dataset", "mawps", "--fold", "2", "--ablation", "gts",
                                      "--set", "train.seed=4"])
    cfg = make_config(args)
    assert (cfg.data.mawps_folds, cfg.model.encoder, cfg.train.lr_step) == ("grouped", "none", 10)
    assert run_name(cfg, "gts") == "mawps-fold2-gts-seed4"
    args = build_parser().parse_args(["--dataset", "mawps", "--mawps-folds", "graph2tree"])
    assert run_name(make_config(args), "full") == "mawps-graph2tree-fold0-full-seed1"
    args = build_parser().parse_args(["--dataset", "mawps", "--mawps-folds", "graph2tree", "--no-mawps-valid"])
    assert run_name(make_config(args), "full") == "mawps-graph2tree-novalid-fold0-full-seed1"
    with pytest.raises(ValueError, match="data.mawps_valid"):
        make_config(build_parser().parse_args(["--dataset", "math23k", "--no-mawps-valid"]))
    assert run_name(tiny(), "full") == "sample-full-seed1"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--mawps-folds", "random"])
    assert "invalid choice: 'random'" in capsys.readouterr().err


def test_train_command_refuses_a_set_on_a_key_its_flags_set():
    # Which of the two should win would be a guess (the run's name comes from the dataset flag).
    from hlgt.commands.train import build_parser, make_config

    for argv, flag in ((["--dataset", "mawps", "--set", "data.dataset=math23k"], "--dataset"),
                       (["--set", "train.out_dir=/tmp/x"], "--storage"),
                       (["--workers", "2", "--set", "train.workers=1"], "--workers"),
                       (["--set", "train.use_gpu=true"], "--gpu")):
        with pytest.raises(ValueError, match=f"and {flag} both set"):
            make_config(build_parser().parse_args(argv))
    assert make_config(build_parser().parse_args(["--storage", "/tmp/x"])).train.out_dir == "/tmp/x"


def _command(shards, out, *more, ray=False):
    """``python -m hlgt.train`` on the tiny model into ``out``, in process unless ``ray``."""
    from hlgt.commands.train import main

    sets = [f"{k}={v}" for k, v in TINY.items() if k not in ("data.dataset", "train.wandb")]
    return main(["--dataset", "sample", "--shards", str(shards), *([] if ray else ["--no-ray"]), "--storage", str(out),
                 "--no-wandb", *[a for s in sets for a in ("--set", s)], *more])


def test_the_command_says_a_run_stopped_by_its_time_budget_is_not_done(shards, tmp_path, capsys):
    assert _command(shards, tmp_path, "--set", "train.epochs=3", "--set", "train.max_minutes=1e-6") == 0
    out = capsys.readouterr().out
    assert "[train] stopped at epoch 1 of 3 (train.max_minutes); the same command goes on from there" in out
    assert "[train] done" not in out
    from hlgt.train.compare import compare

    run = tmp_path / "sample-full-seed1"
    assert compare([run], [run])[0].label == "sample-full-seed1 (stopped at epoch 1 of 3) / sample-full-seed1 " \
                                             "(stopped at epoch 1 of 3)"
    assert _command(shards, tmp_path, "--set", "train.epochs=3") == 0  # the rest of the schedule
    assert "[train] done: " in capsys.readouterr().out
    assert compare([run], [run])[0].label == "sample-full-seed1 / sample-full-seed1"


def test_a_damaged_or_foreign_trainer_state_is_refused_in_one_line(shards, tmp_path):
    import torch

    assert _command(shards, tmp_path, "--set", "train.epochs=2", "--set", "train.max_minutes=1e-6") == 0
    path = tmp_path / "sample-full-seed1" / "checkpoint" / checkpoint.STATE_FILE
    whole = path.read_bytes()
    path.write_bytes(whole[:2000])  # a copy cut short
    with pytest.raises(ValueError, match=r"trainer_state.pt is damaged \(.*\): --fresh starts the run over$"):
        _command(shards, tmp_path, "--set", "train.epochs=2")
    path.write_bytes(whole)
    state = torch.load(path, weights_only=True)
    del state["last_val"], state["starts"]
    torch.save(state, path)
    with pytest.raises(ValueError, match="trainer_state.pt lacks last_val, starts: not a trainer state this code"):
        _command(shards, tmp_path, "--set", "train.epochs=2")
    (path.parent / "config.json").write_text('{"model.heads": 2,')
    with pytest.raises(ValueError, match=r"checkpoint/config.json is damaged: Expecting"):
        _command(shards, tmp_path, "--set", "train.epochs=2")


def test_a_rerun_of_other_settings_is_refused_until_fresh(shards, tmp_path, capsys):
    assert _command(shards, tmp_path, "--set", "train.epochs=1") == 0
    with pytest.raises(ValueError, match=r"sample-full-seed1 holds a run of other settings \(model.hidden_size "
                                         r"16 -> 32; train.epochs 1 -> 2\): --fresh"):
        _command(shards, tmp_path, "--set", "train.epochs=2", "--set", "model.hidden_size=32")
    assert _command(shards, tmp_path, "--set", "train.epochs=1", "--set", "train.threads=2") == 0  # placement only
    assert "resuming from" in capsys.readouterr().out
    # train.batch_size is per worker: another count of workers trains another batch.
    with pytest.raises(ValueError, match=r"other settings \(train.workers 1 -> 2\): --fresh"):
        _command(shards, tmp_path, "--set", "train.epochs=1", "--workers", "2")
    assert _command(shards, tmp_path, "--set", "train.epochs=2", "--fresh") == 0
    out = capsys.readouterr().out
    assert "--fresh: removed" in out and "resuming" not in out
    assert json.loads((tmp_path / "sample-full-seed1" / "results.json").read_text())["epoch"] == 2


def test_a_ray_rerun_of_other_settings_is_refused_on_any_storage(shards, tmp_path):
    """Ray Train keeps checkpoint_<time> folders in the run folder, a URI too (file:// here); the
    newest is the one a re-run resumes, checked before Ray starts."""
    pytest.importorskip("ray.train.torch")
    assert _command(shards, tmp_path / "here", "--set", "train.epochs=1") == 0
    run = tmp_path / "ray" / "sample-full-seed1"
    for kept in ("checkpoint_1", "checkpoint_2"):  # Ray names them by time: the later sorts last
        shutil.copytree(tmp_path / "here" / "sample-full-seed1" / "checkpoint", run / kept)
    older = run / "checkpoint_1" / "config.json"
    older.write_text(json.dumps({**json.loads(older.read_text()), "train.epochs": 3}))
    with pytest.raises(ValueError, match=r"file://.*sample-full-seed1 holds a run of other settings "
                                         r"\(train.lr 0.001 -> 0.5\): --fresh"):
        _command(shards, f"file://{tmp_path / 'ray'}", "--set", "train.epochs=1", "--set", "train.lr=0.5", ray=True)


def test_a_run_folder_resumes_only_the_way_it_was_trained(shards, tmp_path):
    """Ray Train does not resume the loop's checkpoint/, nor the loop Ray's checkpoint_<time>
    folders: a re-run the other way is refused before it trains anew beside them."""
    pytest.importorskip("ray.train.torch")
    assert _command(shards, tmp_path / "here", "--set", "train.epochs=1") == 0
    with pytest.raises(ValueError, match="sample-full-seed1 holds a run trained in process, which this command"):
        _command(shards, tmp_path / "here", "--set", "train.epochs=1", ray=True)
    ray_run = tmp_path / "ray" / "sample-full-seed1"
    shutil.copytree(tmp_path / "here" / "sample-full-seed1" / "checkpoint", ray_run / "checkpoint_1")
    with pytest.raises(ValueError, match="sample-full-seed1 holds a run trained with Ray, which this command"):
        _command(shards, tmp_path / "ray", "--set", "train.epochs=1")


def test_a_run_folder_trains_under_one_command_at_a_time(shards, tmp_path):
    import fcntl

    with open(tmp_path / ".sample-full-seed1.lock", "a+") as lock:  # another command training it
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(OSError, match="another command is training .*sample-full-seed1"):
            _command(shards, tmp_path)
    assert not (tmp_path / "sample-full-seed1").exists()


def test_in_process_the_run_folder_is_local(shards):
    with pytest.raises(ValueError, match="in process the run folder is on this machine, not s3://b/runs/"):
        _command(shards, "s3://b/runs")


def _without_validation(shards, out):
    """A copy of ``shards`` whose valid split is empty, as MAWPS shards with data.mawps_valid=false."""
    shutil.copytree(shards, out, ignore=shutil.ignore_patterns("valid"))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["splits"]["valid"].update(kept=0, shards=[])
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_without_a_validation_split_the_last_epoch_is_kept_and_no_validation_score_is_claimed(
        shards, tmp_path, capsys):
    shards = _without_validation(shards, tmp_path / "shards")
    result = loop.train(tiny(**{"train.lr_step": 10}), shards, run_dir=tmp_path / "run")
    out = capsys.readouterr().out
    assert "no validation split: each epoch's model replaces the last" in out and "val value" not in out
    assert result.metrics[M.BEST_EPOCH] == 2 and M.TEST_VALUE_ACC in result.metrics
    assert M.VAL_VALUE_ACC not in result.metrics and M.VAL_EQUATION_ACC not in result.metrics
    published = json.loads((tmp_path / "run" / "best" / "run_config.json").read_text())
    assert published["epoch"] == 2 and M.VAL_VALUE_ACC not in published
    assert all(M.VAL_VALUE_ACC in m for m in result.history)  # the ranking key still exists for Ray and Tune


def test_charts_get_validation_only_from_the_epochs_that_validated(shards, tmp_path, monkeypatch):
    """Reports carry the last validation forward every epoch (Ray ranks checkpoints by it); the
    tracker's charts (W&B) get it only where validation ran."""
    from hlgt.train import tracking

    logged, summary = [], {}

    class Recorder(tracking.Tracker):
        def log(self, metrics, step=None):
            logged.append((step, dict(metrics)))

        def summary(self, metrics):
            summary.update(metrics)

    monkeypatch.setattr(loop.tracking, "start", lambda *args, **kwargs: Recorder())
    result = loop.train(tiny(**{"train.epochs": 4, "train.eval_every": 3}), shards, run_dir=tmp_path / "run")
    assert [step for step, _ in logged] == [1, 2, 3, 4]
    # The summary's validation loss is the best epoch's, beside that epoch's accuracies.
    best = dict(logged)[summary[M.BEST_EPOCH]]
    assert summary[M.VAL_TREE_LOSS] == best[M.VAL_TREE_LOSS] and summary[M.BEST_EPOCH] == result.metrics[M.BEST_EPOCH]
    assert [M.VAL_VALUE_ACC in m for _, m in logged] == [True, False, True, True]  # the first, every third, the last
    assert all(M.TRAIN_TREE_LOSS in m for _, m in logged)
    assert all(M.VAL_VALUE_ACC in m for m in result.history)  # the reports still carry it
    logged.clear()
    loop.train(tiny(), _without_validation(shards, tmp_path / "shards"), run_dir=tmp_path / "novalid")
    assert len(logged) == 2 and not any(M.VAL_VALUE_ACC in m for _, m in logged)  # never a made-up 0%


def test_train_compile_compiles_the_decoder_levels_and_graph_layers_of_the_trained_model(shards):
    trainer = loop.Trainer(tiny(**{"train.compile": True}), shards, loop.Runtime(), None, None)
    trainer.prepare_training()
    solver = trainer.solver
    assert (type(solver.decoder).__name__, type(solver.encoder.graph).__name__) == (
        "CompiledTreeDecoder", "CompiledHLGTGraphEncoder")
    assert type(loop.Trainer(tiny(), shards, loop.Runtime(), None, None).solver.decoder).__name__ == "TreeDecoder"


def test_word_vectors_start_the_embedding(shards, tmp_path, capsys):
    from hlgt.data.shards import load_vocab
    from hlgt.data.vocab import read_word_vectors
    from hlgt.model.solver import Solver

    vocab = load_vocab(shards)
    words = vocab.words[3:6]
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("4 8\n" + "".join(f"{w} " + " ".join(str(i + 0.5 * k) for k in range(8)) + "\n"
                                         for i, w in enumerate(words))
                       + "not in the vocabulary 1 2\n" + f"{words[0]} " + " ".join(["9"] * 8) + "\n", encoding="utf-8")
    found = read_word_vectors(vectors, vocab, 8)
    assert [vocab.words[i] for i in found.ids] == sorted(words, key=vocab.word_id)
    assert found.vectors[found.ids.index(vocab.word_id(words[0]))] == [0.5 * k for k in range(8)]  # the first wins
    assert (found.lines, found.malformed) == (5, 1)
    with pytest.raises(ValueError, match="model.embedding_size=8"):
        read_word_vectors(vectors, vocab, 16)
    with pytest.raises(FileNotFoundError):
        read_word_vectors(tmp_path / "none.txt", vocab, 8)

    # lr 1e-30 (a learning rate must be > 0): the trained embedding is still the loaded one.
    run = tmp_path / "run"
    loop.train(tiny(**{"train.word_vectors": str(vectors), "train.lr": 1e-30, "train.epochs": 1}), shards, run_dir=run)
    weight = Solver.load(run / "best").encoder.embedding.weight
    for i, w in enumerate(words):
        assert weight[vocab.word_id(w)].tolist() == pytest.approx([i + 0.5 * k for k in range(8)])
    assert "word vectors: 3 of" in capsys.readouterr().out


def test_grad_clip_bounds_the_update_and_reports_the_norm(shards, tmp_path):
    plain = loop.train(tiny(), shards, run_dir=tmp_path / "plain", evaluate_test=False)
    loose = loop.train(tiny(**{"train.grad_clip": 1e9}), shards, run_dir=tmp_path / "loose", evaluate_test=False)
    tight = loop.train(tiny(**{"train.grad_clip": 1e-4}), shards, run_dir=tmp_path / "tight", evaluate_test=False)

    norms = [m[M.TRAIN_GRAD_NORM_MAX] for m in plain.history]
    assert all(n > 1e-4 for n in norms)  # the norm is measured before clipping, with or without it
    # A bound above every norm changes nothing; one below them changes the training.
    assert [m[M.TRAIN_LOSS] for m in loose.history] == [m[M.TRAIN_LOSS] for m in plain.history]
    assert tight.history[1][M.TRAIN_LOSS] != plain.history[1][M.TRAIN_LOSS]
    with pytest.raises(ValueError, match="grad_clip"):
        loop.train(tiny(**{"train.grad_clip": -1.0}), shards, run_dir=tmp_path / "bad")


def test_a_run_that_fails_before_its_first_epoch_leaves_no_folder(shards, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(shards, broken)
    for part in (broken / "train").glob("*.parquet"):
        part.write_bytes(part.read_bytes()[:100])
    run = tmp_path / "runs" / "failed"
    with pytest.raises(ValueError, match=r"broken/train/part-00000\.parquet.*Parquet magic bytes"):
        loop.train(tiny(), broken, run_dir=run)
    assert not run.exists() and not (tmp_path / "runs").exists()


def test_epoch_stats_norms_are_each_parts_and_the_whole_models():
    # One multi-tensor norm per step, summed by part, equals the per-part and global norms that
    # clip_grad_norm_ would take; a parameter without a gradient counts as zero.
    import torch

    torch.manual_seed(0)
    a, b, c, idle = (torch.nn.Parameter(torch.randn(s)) for s in ((3, 4), (5,), (2, 2), (7,)))
    for p in (a, b, c):
        p.grad = torch.randn_like(p)
    stats = step.EpochStats({"x": [a, b], "y": [c, idle], "z": [idle]}, torch.device("cpu"))
    out = {"loss": torch.tensor(1.0), "tree_loss": torch.tensor(1.0), "com_loss": torch.tensor(0.0), "scales": {}}
    total = stats.step(out, 4)
    get = torch.nn.utils.get_total_norm
    torch.testing.assert_close(total, get([a.grad, b.grad, c.grad]))
    torch.testing.assert_close(stats.norm_max, torch.stack([total, get([a.grad, b.grad]), get([c.grad]),
                                                            torch.tensor(0.0)]))


@pytest.mark.parametrize("name", [".", "..", "../victim", "a/b", "/abs/run", ""])
def test_a_name_that_is_no_folder_name_is_refused_before_anything_is_removed(shards, tmp_path, name):
    storage = tmp_path / "runs"
    (storage / "other-run").mkdir(parents=True)
    (storage / "other-run" / "keep.txt").write_text("another run's")
    (tmp_path / "victim").mkdir()
    with pytest.raises(ValueError, match="is not a folder name"):
        _command(shards, storage, "--name", name, "--fresh")
    assert (storage / "other-run" / "keep.txt").exists() and (tmp_path / "victim").is_dir()


def test_fresh_removes_only_a_run_folder_the_project_made(shards, tmp_path, capsys):
    mine = tmp_path / "runs" / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("not a run")
    with pytest.raises(ValueError, match=rf"--fresh removes only a run folder the project made, and {mine} has no "
                                         rf"\.hlgt-folder file .* remove it by hand \(rm -r {mine}\)"):
        _command(shards, tmp_path / "runs", "--name", "mine", "--fresh", "--set", "train.epochs=1")
    assert (mine / "notes.txt").exists()
    # Nor does a plain run train into it (training replaces best/, checkpoint/ and metrics.jsonl).
    (mine / "best").mkdir()
    (mine / "best" / "model.pt").write_text("the user's")
    with pytest.raises(ValueError, match=rf"{mine} holds files and no \.hlgt-folder: it is not a run folder.*: give "
                                         r"another --name \(or --storage\)$"):
        _command(shards, tmp_path / "runs", "--name", "mine", "--set", "train.epochs=1")
    assert (mine / "best" / "model.pt").read_text() == "the user's"
    # A folder of the user's named checkpoint is no earlier version's run: it holds no trainer state.
    (mine / "checkpoint").mkdir()
    (mine / "checkpoint" / "notes.txt").write_text("the user's")
    with pytest.raises(ValueError, match=rf"{mine} holds files and no \.hlgt-folder"):
        _command(shards, tmp_path / "runs", "--name", "mine", "--set", "train.epochs=1")
    assert (mine / "checkpoint" / "notes.txt").read_text() == "the user's"
    # An earlier version's run (no marker, a checkpoint with its trainer state) is still taken.
    from hlgt.storage import claim
    from hlgt.train.checkpoint import EARLIER_RUN, STATE_FILE

    (tmp_path / "old" / "checkpoint").mkdir(parents=True)
    (tmp_path / "old" / "checkpoint" / STATE_FILE).touch()
    ray_checkpoint = tmp_path / "old-ray" / "checkpoint_000001"  # Ray Train's checkpoint_<time> folders
    ray_checkpoint.mkdir(parents=True)
    (ray_checkpoint / STATE_FILE).touch()
    for old in ("old", "old-ray"):
        claim(str(tmp_path / old), "run", earlier=EARLIER_RUN)
        assert not (tmp_path / old / ".hlgt-folder").exists()  # resumed as it is
    # Nor does a training put a run into another command's folder (a curve's arms, a sweep's).
    claim(str(tmp_path / "a-curve"), "curve")
    with pytest.raises(ValueError, match="--storage .*a-curve is a curve folder: its folders are that curve's"):
        _command(shards, tmp_path / "a-curve", "--name", "full", "--set", "train.epochs=1")
    assert _command(shards, tmp_path / "runs", "--name", "ours", "--set", "train.epochs=1") == 0
    assert _command(shards, tmp_path / "runs", "--name", "ours", "--fresh", "--set", "train.epochs=1") == 0
    assert "--fresh: removed" in capsys.readouterr().out


def test_a_torn_last_metrics_line_is_dropped_with_a_warning_naming_the_file(tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    lines = [json.dumps({M.EPOCH: e, M.TRAIN_LOSS: 1.0 / e}) for e in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + '\n{"epoch": 4, "train/lo', encoding="utf-8")  # killed
    checkpoint.LocalReporter(run).restart(2)
    assert _logged_epochs(run) == [1, 2]
    assert f"{run / 'metrics.jsonl'} line 4 is not a metrics record" in capsys.readouterr().out


def _named_plan(names: list):
    import threading
    import time

    def plan(i):
        names.append(threading.current_thread().name)
        if i == "bad":
            raise ValueError("a batch that cannot be planned")
        time.sleep(0.001 * (i % 3))  # uneven, as batches are
        return i * 10
    return plan


def test_batches_are_planned_inline_on_the_cpu_and_ahead_by_a_thread_on_a_gpu():
    import threading

    import torch

    names: list = []
    assert list(step.planned(range(5), _named_plan(names), torch.device("cpu"))) == [0, 10, 20, 30, 40]
    assert set(names) == {threading.current_thread().name}
    names.clear()
    assert list(step.planned(range(40), _named_plan(names), torch.device("cuda"))) == [i * 10 for i in range(40)]
    assert set(names) == {"hlgt-plan-ahead"}
    assert not any(t.name == "hlgt-plan-ahead" for t in threading.enumerate())  # done with the epoch


def test_a_planning_error_reaches_the_step_and_a_consumer_that_stops_stops_the_thread():
    import threading

    import torch

    got = []
    with pytest.raises(ValueError, match="cannot be planned"):
        for x in step.planned([1, 2, "bad", 4], _named_plan([]), torch.device("cuda")):
            got.append(x)
    assert got == [10, 20]
    source = iter(range(1000))
    batches = step.planned(source, _named_plan([]), torch.device("cuda"))
    assert next(batches) == 0
    batches.close()  # an epoch ended by an error in its step
    assert not any(t.name == "hlgt-plan-ahead" for t in threading.enumerate())
    assert next(source) <= step.AHEAD + 2  # planned no further than the batches waiting


def test_training_with_batches_planned_ahead_matches_training_inline(shards, tmp_path, monkeypatch):
    inline = loop.train(tiny(), shards, run_dir=tmp_path / "inline")
    monkeypatch.setattr(loop, "planned", lambda batches, plan, device: step._ahead(map(plan, batches)))
    ahead = loop.train(tiny(), shards, run_dir=tmp_path / "ahead")
    assert [m[M.TRAIN_LOSS] for m in ahead.history] == [m[M.TRAIN_LOSS] for m in inline.history]
    assert ahead.metrics[M.TEST_VALUE_ACC] == inline.metrics[M.TEST_VALUE_ACC]


def test_a_training_holds_its_shards_until_it_ends(shards, tmp_path, monkeypatch):
    """It reads them every epoch and at its end: a build that would replace them meanwhile is refused."""
    from hlgt.data.build import build
    from hlgt.storage import not_being_read

    refused = []

    def train_while_a_rebuild_is_tried(cfg, folder, **kw):
        with pytest.raises(OSError, match="is being read by a running command"):
            build(cfg, out=folder, actors=0, force=True)
        refused.append(folder)
        return loop.TrainResult(metrics={}, history=[], checkpoint=None)

    monkeypatch.setattr(loop, "train", train_while_a_rebuild_is_tried)
    assert _command(shards, tmp_path) == 0 and refused
    with not_being_read(shards, "still held"):  # the hold ended with the command
        pass
    # Shards the command builds (or reuses) itself are held the same way.
    from hlgt.commands.train import main

    sets = [f"{k}={v}" for k, v in {**TINY, "data.shards_dir": str(shards.parent)}.items()
            if k not in ("data.dataset", "train.wandb")]
    assert main(["--dataset", "sample", "--no-ray", "--storage", str(tmp_path / "built"), "--no-wandb",
                 *[a for s in sets for a in ("--set", s)]]) == 0
    assert refused[-1] == shards and len(refused) == 2


def test_a_training_reads_shards_at_a_uri(shards, tmp_path):
    """A cluster's shared storage (s3://...; file:// here): the in-process loop reads it too."""
    shutil.copytree(shards, tmp_path / "bucket" / "shards")
    assert _command(f"file://{tmp_path}/bucket/shards", tmp_path / "runs", "--set", "train.epochs=1") == 0
    assert json.loads((tmp_path / "runs" / "sample-full-seed1" / "results.json").read_text())["epoch"] == 1


def test_gathered_validation_predictions_are_placed_by_problem():
    # Two ranks decode interleaved slices of the validation rows; gathered, each prediction goes to
    # its own problem. A rank that read the rows in another order decoded a slice of that order.
    rows = [{"id": i} for i in ("a", "b", "c", "d", "e")]
    same = [[("a", "pa"), ("c", "pc"), ("e", "pe")], [("b", "pb"), ("d", "pd")]]
    assert loop.placed_by_id(rows, same) == ["pa", "pb", "pc", "pd", "pe"]
    other_order = [[("a", "pa"), ("c", "pc"), ("e", "pe")], [("c", "pc"), ("a", "pa")]]  # rank 1 read e, c, a, d, b
    with pytest.raises(RuntimeError, match="read the validation rows in different orders"):
        loop.placed_by_id(rows, other_order)


def test_a_run_started_over_under_its_name_gets_a_w_and_b_run_of_its_own(shards, tmp_path, monkeypatch):
    # Its resumes write to its W&B run; --fresh starts another, which the old run's later steps
    # would otherwise swallow (W&B ignores a step below the run's last).
    from hlgt.commands.train import main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    sets = [a for k, v in TINY.items() if k not in ("data.dataset", "train.wandb") for a in ("--set", f"{k}={v}")]

    def command(*more):
        assert main(["--dataset", "sample", "--shards", str(shards), "--no-ray", "--storage", str(tmp_path), *sets,
                     "--set", "train.epochs=3", *more]) == 0
        # offline-run-<time>-<run id>[-<n>]: W&B adds -<n> when a folder of that second and id exists
        folders = (tmp_path / "sample-full-seed1" / "wandb").glob("offline-run-*")
        return {re.search(r"-([0-9a-f]{8})(?:-\d+)?$", p.name).group(1) for p in folders}

    first = command("--set", "train.max_minutes=1e-6")  # stops after epoch 1
    assert len(first) == 1 and command() == first  # the rest of the schedule: the same W&B run
    assert len(again := command("--fresh")) == 1 and again != first


def test_ranks_start_from_one_initialisation_but_draw_dropout_apart(shards):
    # DDP keeps the weights alike; the ranks' dropout masks (their torch generators) differ.
    import torch

    first = loop.Trainer(tiny(), shards, loop.Runtime(), None, None)
    stream_0 = torch.get_rng_state()
    second = loop.Trainer(tiny(), shards, loop.Runtime(rank=1, world_size=2), None, None)
    assert not torch.equal(torch.get_rng_state(), stream_0)
    weights = zip(first.solver.state_dict().values(), second.solver.state_dict().values())
    assert all(torch.equal(a, b) for a, b in weights)
    loop.Trainer(tiny(), shards, loop.Runtime(), None, None)
    assert torch.equal(torch.get_rng_state(), stream_0)  # rank 0's stream is the run's seed's, as before


def test_a_resumed_rank_past_0_does_not_draw_its_first_masks_again(shards, tmp_path):
    # The checkpoint holds rank 0's generators; another rank resumes from a seed of its rank and
    # epoch, not at the start of its stream again (its first epochs' dropout masks).
    import torch

    from hlgt.train.checkpoint import write_checkpoint

    trainer = loop.Trainer(tiny(), shards, loop.Runtime(), None, None)
    trainer.state["epoch"] = 1
    write_checkpoint(tmp_path / "ck", tiny(), trainer.solver, trainer.best_weights, trainer.opt, trainer.sched,
                     trainer.state)
    loop.Trainer(tiny(), shards, loop.Runtime(rank=1, world_size=2), None, None)
    fresh = torch.get_rng_state()
    loop.Trainer(tiny(), shards, loop.Runtime(rank=1, world_size=2), None, tmp_path / "ck")
    resumed = torch.get_rng_state()
    trainer.state["epoch"] = 2
    write_checkpoint(tmp_path / "ck2", tiny(), trainer.solver, trainer.best_weights, trainer.opt, trainer.sched,
                     trainer.state)
    loop.Trainer(tiny(), shards, loop.Runtime(rank=1, world_size=2), None, tmp_path / "ck2")
    assert not torch.equal(resumed, fresh) and not torch.equal(torch.get_rng_state(), resumed)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_a_resumed_run_on_a_gpu_goes_on_with_the_gpus_generator(shards, tmp_path):
    # Dropout on a GPU draws from the GPU's generator: a resume restores it, or it would replay
    # the masks of the run's first epochs.
    import torch

    cfg = tiny(**{"train.use_gpu": True, "train.epochs": 2})
    device = torch.device("cuda")
    trainer = loop.Trainer(cfg, shards, loop.Runtime(device=device), None, None)
    torch.rand(1000, device=device)  # the generator moved on, as by an epoch's dropout
    from hlgt.train.checkpoint import write_checkpoint

    write_checkpoint(tmp_path / "ck", cfg, trainer.solver, trainer.best_weights, trainer.opt, trainer.sched,
                     trainer.state)
    moved = torch.cuda.get_rng_state(device)
    torch.cuda.manual_seed(12345)
    loop.Trainer(cfg, shards, loop.Runtime(device=device), None, tmp_path / "ck")
    assert torch.equal(torch.cuda.get_rng_state(device), moved)


def test_activation_scales_are_averaged_over_every_workers_batches():
    # Summed over workers with the losses, not rank 0's batches alone.
    import torch

    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    ranks = [step.EpochStats({"x": [p]}, torch.device("cpu")) for _ in range(2)]
    for stats, scales in zip(ranks, ([1.0, 3.0], [8.0])):  # rank 0: two batches, rank 1: one
        for scale in scales:
            stats.step({"loss": torch.tensor(1.0), "tree_loss": torch.tensor(1.0), "com_loss": torch.tensor(0.0),
                        "scales": {"h_b": torch.tensor(scale)}}, 4)
    summed = ranks[0].sums() + ranks[1].sums()
    assert ranks[0].scale_means(summed) == {"scale/h_b": 4.0} and summed[3] == 12  # 12 problems

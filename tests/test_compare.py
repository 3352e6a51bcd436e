"""Paired comparison of runs: counts, the exact McNemar p, pooling, the errors that keep two
different problem sets from being compared, and two runs' learning curves side by side."""
import json
import math
import random

import pytest
import torch

from hlgt.commands.compare import main
from hlgt.train.checkpoint import STATE_FILE
from hlgt.train.compare import (
    Paired,
    Unfinished,
    chi2_sf,
    cochran_q,
    cochran_q_by_problem,
    compare,
    curve,
    curves,
    markdown,
    mcnemar_exact,
    predictions_file,
    sign_flip_exact,
)


def write(path, verdicts):
    """A predictions file with one line per (id, value right, equation right)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "value_correct": v, "equation_correct": e}) + "\n"
                            for i, v, e in verdicts), encoding="utf-8")
    return path


def test_exact_mcnemar_matches_the_binomial_test():
    # scipy.stats.binomtest(26, 38).pvalue = 0.03355..., binomtest(94, 146).pvalue = 0.000642...
    assert mcnemar_exact(26, 12) == pytest.approx(0.033551, rel=1e-4)
    assert mcnemar_exact(12, 26) == mcnemar_exact(26, 12)
    assert mcnemar_exact(94, 52) == pytest.approx(0.000642, rel=1e-2)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert 0 < mcnemar_exact(1500, 1000) < 1e-20  # big counts: exact integers, no overflow


def test_the_sign_flip_test_is_mcnemar_by_problem():
    for only_a, only_b in ((26, 12), (72, 44), (5, 5), (1, 0), (0, 0)):
        differences = [1] * only_a + [-1] * only_b + [0] * 7  # each problem once
        assert sign_flip_exact(differences) == pytest.approx(mcnemar_exact(only_a, only_b), rel=1e-12)
    # Two problems A alone solves in both of two seeds: of the 4 sign choices, 2 give |sum| >= 4.
    assert sign_flip_exact([2, 2, 0]) == 0.5
    assert sign_flip_exact(iter([2, -1])) == 1.0  # any iterable


def test_pairs_over_the_same_problems_pool_by_problem(tmp_path):
    """Two seeds on one test set: pooled counts take every problem twice; the p takes it once."""
    seed1 = [write(tmp_path / f"{arm}1.jsonl", [("x", a, a), ("y", a, a), ("z", True, True)]) for arm, a in
             (("a", True), ("b", False))]
    seed2 = [write(tmp_path / f"{arm}2.jsonl", [("x", a, a), ("y", a, a), ("z", False, False)]) for arm, a in
             (("a", True), ("b", False))]
    rows = compare([seed1[0], seed2[0]], [seed1[1], seed2[1]])
    pooled = rows[-1]
    assert (pooled.n, pooled.only_a, pooled.only_b, pooled.repeats) == (6, 4, 0, True)
    # McNemar over the pooled counts would say 2 / 2^4 = 0.125; by problem x and y count once each.
    assert pooled.p == 0.5 and mcnemar_exact(4, 0) == 0.125
    assert not rows[0].repeats and rows[0].p == mcnemar_exact(2, 0)
    other_file = write(tmp_path / "other.jsonl", [("x", True, True), ("w", True, True), ("v", False, False)])
    with pytest.raises(ValueError, match="share 1 problem ids but not all"):
        compare([seed1[0], other_file], [seed1[1], other_file])  # "x" there is another problem
    counts_only = Paired("counts", 4, 3, 1, 2, 0)  # no problem ids: pooled by counts
    assert (rows[0] + counts_only).p == mcnemar_exact(4, 0)
    assert "| pooled (problems in several pairs: p by problem) | 6 | 83.3% | 16.7% | 4 / 0 | 0.5 |" in markdown(
        rows, "value")


def test_cochran_q_over_three_models_and_the_chi_square_tail():
    # The chi-square's 95th percentiles: 3.841459 (1 df), 5.991465 (2), 11.0705 (5), 15.50731 (8).
    for x, df in ((3.841459, 1), (5.991465, 2), (11.0705, 5), (15.50731, 8)):
        assert chi2_sf(x, df) == pytest.approx(0.05, rel=1e-4)
    assert chi2_sf(0.0, 3) == 1.0 and chi2_sf(1e4, 7) < 1e-12
    # By hand: models solve 3, 1 and 2 of 4 problems, rows 3, 2, 1, 0: Q = 2 (3 * 14 - 36) / (18 - 14) = 3.
    a = {"1": True, "2": True, "3": True, "4": False}
    b = {"1": True, "2": False, "3": False, "4": False}
    c = {"1": True, "2": True, "3": False, "4": False}
    q, df, p = cochran_q([a, b, c])
    assert (q, df) == (3.0, 2) and p == pytest.approx(math.exp(-1.5))
    assert cochran_q([a, a, a]) == (0.0, 2, 1.0)  # no problem splits them
    with pytest.raises(ValueError, match="three or more"):
        cochran_q([a, b])
    with pytest.raises(ValueError, match="same problems"):
        cochran_q([a, b, {"1": True}])


def test_cochran_q_by_problem_takes_each_problem_once():
    rng = random.Random(3)
    once = [{(0, i): rng.random() < rate for i in range(200)} for rate in (0.55, 0.6, 0.7)]
    q, df, chi2_p = cochran_q([{k[1]: v for k, v in m.items()} for m in once])
    q_once, _, p_once = cochran_q_by_problem(once)
    # Each problem once: the permutation p estimates the chi-square's (10,000 draws: +- 0.005).
    assert q_once == q and abs(p_once - chi2_p) < 0.02 and 0.001 < chi2_p < 0.5
    # The same verdicts twice (two seeds alike): Q over the 400 rows doubles and its chi-square p
    # shrinks, as if the repeats were new problems; by problem the p is the same as once.
    twice = [{**m, **{(1, k[1]): v for k, v in m.items()}} for m in once]
    q_twice, _, p_twice = cochran_q_by_problem(twice)
    assert q_twice == pytest.approx(2 * q) and chi2_sf(q_twice, df) < chi2_p / 5
    assert p_twice == p_once and cochran_q_by_problem(twice) == (q_twice, df, p_twice)  # seeded
    alike = [once[0]] * 3
    assert cochran_q_by_problem(alike) == (0.0, 2, 1.0)


def test_pairs_by_problem_id_and_pools(tmp_path):
    a0 = write(tmp_path / "a0" / "predictions_test.jsonl", [("x", True, True), ("y", True, False), ("z", False, False)])
    b0 = write(tmp_path / "b0" / "predictions_test.jsonl", [("z", True, True), ("y", True, True), ("x", False, False)])
    a1 = write(tmp_path / "a1" / "predictions_test.jsonl", [("u", True, True), ("v", True, True)])
    b1 = write(tmp_path / "b1" / "predictions_test.jsonl", [("u", True, False), ("v", False, False)])
    rows = compare([a0.parent, a1.parent / "best"], [b0, b1.parent])
    assert [(r.n, r.right_a, r.right_b, r.only_a, r.only_b) for r in rows] == [
        (3, 2, 2, 1, 1), (2, 2, 1, 1, 0), (5, 4, 3, 2, 1)]
    assert rows[0].label == "a0 / b0" and rows[-1].label == "pooled"
    final = write(tmp_path / "a2" / "checkpoint" / "predictions_test.jsonl", [("x", True, True)])
    rows = compare([final.parent, final.parent], [final.parent / "best", final])
    assert [r.label for r in rows] == ["a2 / a2", "a2 / a2", "pooled"]  # a final checkpoint names its run
    (final.parent / STATE_FILE).touch()  # its last-epoch model is not what the predictions beside it scored
    with pytest.raises(ValueError, match="last-epoch model.*hlgt.train.evaluate --model"):
        compare([final.parent / "model"], [final])
    evaluated = write(tmp_path / "model" / "predictions_test.jsonl", [("x", True, True)])
    assert compare([evaluated.parent], [final])[0].n == 1  # an evaluate --out folder of that name is read
    equation = compare([a0], [b0], metric="equation")
    assert [(r.right_a, r.right_b, r.only_a, r.only_b) for r in equation] == [(1, 2, 1, 2)]


def test_different_problems_or_counts_are_errors(tmp_path):
    a = write(tmp_path / "a.jsonl", [("x", True, True), ("y", True, True)])
    b = write(tmp_path / "b.jsonl", [("x", True, True), ("w", True, True)])
    with pytest.raises(ValueError, match="different problems"):
        compare([a], [b])
    with pytest.raises(ValueError, match="paired by position"):
        compare([a, a], [a])
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(FileNotFoundError, match="has the run finished"):
        compare([tmp_path / "unfinished"], [a])
    with pytest.raises(FileNotFoundError, match="typo does not exist"):
        compare([tmp_path / "typo"], [a])
    bad = write(tmp_path / "bad.jsonl", [("x", True, True)])
    bad.write_text('{"id": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not a predictions file"):
        compare([bad], [bad])
    bad.write_text('{"id": "x", "value_correct": true}\n{"id": "y",\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{bad}, line 2: not JSON"):
        compare([bad], [bad])
    bad.write_text('{"id": "x", "value_correct": true}\n5\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{bad}, line 2: not a JSON object"):
        compare([bad], [bad])
    bad.write_text('{"id": ["x"], "value_correct": true}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not a predictions file"):
        compare([bad], [bad])
    bad.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="the files hold no predictions"):
        compare([bad], [bad])


def test_command_prints_a_table(tmp_path, capsys):
    a = write(tmp_path / "a.jsonl", [("x", True, True), ("y", True, True)])
    b = write(tmp_path / "b.jsonl", [("x", True, True), ("y", False, False)])
    assert main(["--a", str(a), "--b", str(b)]) == 0
    out = capsys.readouterr().out
    assert "| a.jsonl / b.jsonl | 2 | 100.0% | 50.0% | 1 / 0 | 1 |" in out


def run_folder(path, epochs, settings, ray_times=()):
    """A run folder as training leaves it, with only what the curves read: per-epoch metrics in
    the trainer state (validation where an epoch's ``validated`` is true) and the config.
    ``ray_times``: Ray Train's ``checkpoint_<time>`` folders instead of ``checkpoint``, in the
    order they were written (each one epoch more), made in reverse so that the listing's order
    cannot stand in for a choice."""
    history = [{"epoch": e, "train/tree_loss": loss, "val/value_acc": val[0], "val/equation_acc": val[1],
                **({"val/tree_loss": 0.5} if validated else {})} for e, loss, val, validated in epochs]
    folders = [f"checkpoint_{t}" for t in ray_times] or ["checkpoint"]
    for n, name in reversed(list(enumerate(folders, 1))):
        kept = history[: len(history) - len(folders) + n]
        (path / name).mkdir(parents=True)
        torch.save({"epoch": len(kept), "history": kept, "optimizer": {}}, path / name / "trainer_state.pt")
        (path / name / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    return path


def test_curves_side_by_side_with_the_settings_that_differ(tmp_path):
    a = run_folder(tmp_path / "full-seed2", [(1, 1.2834, (0.335, 0.295), True), (2, 0.8346, (0.335, 0.295), False),
                                              (3, 0.6842, (0.5, 0.45), True)],
                   {"model.ablation": "full", "train.seed": 2, "train.threads": 2, "train.workers": 1})
    b = run_folder(tmp_path / "gts-seed2", [(1, 1.3, (0.3, 0.25), True), (2, 0.9, (0.3, 0.25), False)],
                   {"model.ablation": "gts", "train.seed": 2, "train.threads": 1, "train.workers": 2},
                   ray_times=("t1", "t2"))
    text = curves([a], [b])
    # Threads say how a run ran, not what it trained: left out; workers multiply the batch: shown.
    assert text.startswith("Learning curves: A full-seed2, B gts-seed2; settings A -> B: "
                           "model.ablation 'full' -> 'gts'; train.workers 1 -> 2\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows == ["| 1 | 1.283 | 1.300 | 33.5% / 29.5% | 30.0% / 25.0% |",
                    "| 2 | 0.835 | 0.900 |  |  |",  # no validation that epoch: its carried-over values are not shown
                    "| 3 | 0.684 | – | 50.0% / 45.0% | – |"]  # B has not trained epoch 3 (yet)
    assert "none differ" in curves([a], [a])
    with pytest.raises(ValueError, match="paired by position"):
        curves([a, a], [b])


def test_which_checkpoint_a_curve_comes_from(tmp_path):
    epochs = [(e, 1.0 / e, (0.1 * e, 0.1 * e), True) for e in range(1, 4)]
    # Ray names checkpoints by local time, which can go back: the later one's name may sort first.
    # The most epochs decide.
    ray = run_folder(tmp_path / "ray", epochs, {}, ray_times=("t2", "t1"))
    assert [m["epoch"] for m in curve(ray).history] == [1, 2, 3]
    assert curve(ray).label == "ray"
    # Ray copies a checkpoint's files in place: a half-written newest one is passed over.
    late = ray / "checkpoint_t3"
    late.mkdir()
    (late / "trainer_state.pt").write_bytes(b"PK\x03\x04 cut short")
    assert (curve(ray).epoch, curve(ray).passed_over) == (3, 1)
    assert ("none differ; 1 unreadable checkpoint(s) of A passed over; 1 unreadable checkpoint(s) of B "
            "passed over\n") in curves([ray], [ray / "best"])
    # A run's best/ is published when it ends: before, it names the run still training.
    assert not (ray / "best").exists() and curve(ray / "best").epoch == 3
    local = run_folder(tmp_path / "local", epochs, {})
    (local / "best").mkdir()  # published at the end, as the checkpoint's
    (local / "checkpoint" / "best").mkdir()
    (local / "checkpoint" / "model").mkdir()
    for path in (local, local / "best", local / "checkpoint", local / "checkpoint" / "best",
                 local / "checkpoint" / "model"):
        assert curve(path).epoch == 3 and curve(path).label == "local"
    predictions = write(tmp_path / "p.jsonl", [("x", True, True)])
    (tmp_path / "empty").mkdir()
    for not_a_run in (predictions, tmp_path / "empty"):
        with pytest.raises(FileNotFoundError, match="learning curves are read from a run folder"):
            curve(not_a_run)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        curve(tmp_path / "typo")
    with pytest.raises(ValueError, match="copy it from the storage first"):
        curves(["s3://bucket/runs/a"], [local])


def test_a_damaged_checkpoint_is_a_clear_error(tmp_path):
    run = run_folder(tmp_path / "run", [(1, 1.0, (0.2, 0.1), True)], {})
    state, config = run / "checkpoint" / "trainer_state.pt", run / "checkpoint" / "config.json"
    good = state.read_bytes()
    damages = [lambda: state.write_bytes(b"not a torch file"),
               lambda: torch.save({"history": [1, 2], "epoch": 2}, state),
               lambda: torch.save({"epoch": 1}, state),
               lambda: torch.save({"epoch": float("inf"), "history": []}, state),
               lambda: torch.save(torch.zeros(2), state),
               lambda: torch.save({"epoch": 1, "history": [{"epoch": [1], "train/tree_loss": 1.0}]}, state),
               lambda: torch.save({"epoch": 1, "history": [{"epoch": 1, "train/tree_loss": "1.0"}]}, state),
               lambda: torch.save({"epoch": 1, "history": [{"epoch": 1, "train/tree_loss": 1.0,
                                                            "val/tree_loss": 0.5}]}, state),
               lambda: config.write_text("[1, 2]", encoding="utf-8"),
               lambda: config.write_text("null", encoding="utf-8"),
               lambda: config.unlink()]
    for damage in damages:
        state.write_bytes(good)
        config.write_text("{}", encoding="utf-8")
        damage()
        with pytest.raises(ValueError, match="not a checkpoint written by hlgt's training"):
            curve(run)


def test_command_shows_curves_of_runs_still_training(tmp_path, capsys):
    a = run_folder(tmp_path / "a", [(1, 1.0, (0.2, 0.1), True)], {"model.ablation": "full"})
    b = run_folder(tmp_path / "b", [(1, 1.1, (0.1, 0.1), True)], {"model.ablation": "gts"})
    assert main(["--a", str(a), "--b", str(b), "--curves"]) == 0
    out = capsys.readouterr().out
    assert "no paired counts until every run has finished" in out
    assert "| 1 | 1.000 | 1.100 | 20.0% / 10.0% | 10.0% / 10.0% |" in out
    with pytest.raises(FileNotFoundError, match="has the run finished"):
        main(["--a", str(a), "--b", str(b)])  # without --curves an unfinished run is still an error
    with pytest.raises(FileNotFoundError, match="does not exist"):
        main(["--a", str(tmp_path / "typo"), "--b", str(b), "--curves"])  # a typo is not an unfinished run


def test_a_model_folder_away_from_its_run_is_evaluated_first(model_dir, tmp_path):
    # Predictions beside a copied best/ are whatever that folder held (here another model's).
    import shutil

    own = model_dir.parent / "predictions_test.jsonl"  # the run's, of its best
    assert compare([model_dir], [own])[0].only_a == 0
    other = write(tmp_path / "elsewhere" / "predictions_test.jsonl", [("x", False, False)])
    shutil.copytree(model_dir, tmp_path / "elsewhere" / "best")
    shutil.copytree(model_dir, tmp_path / "renamed")
    for copy, why in ((tmp_path / "elsewhere" / "best", "outside its run"),
                      (tmp_path / "renamed", "without predictions")):
        with pytest.raises(ValueError, match=f"{why}.*evaluate it first \\(python -m hlgt.train.evaluate --model"):
            compare([copy], [other])
    # A checkpoint's best/ while its run trains: no predictions yet (--curves reads on).
    training = tmp_path / "training" / "checkpoint"
    shutil.copytree(model_dir, training / "best")
    (training / STATE_FILE).touch()
    with pytest.raises(Unfinished):
        predictions_file(training / "best", "test")


def test_curves_of_trained_runs(model_dir, tmp_path, capsys):
    """The curves read what the training loop writes: its checkpoint's history and config, with
    validation only on the epochs that validated (the first, every third, the last)."""
    from hlgt.config import Config
    from hlgt.data.build import ensure_shards
    from hlgt.train import loop

    flat = json.loads((model_dir.parent / "checkpoint" / "config.json").read_text(encoding="utf-8"))
    cfg = Config.from_flat({**flat, "train.epochs": 4, "train.eval_every": 3})
    run = tmp_path / "run"
    loop.train(cfg, ensure_shards(cfg), run_dir=run)
    assert main(["--a", str(run), "--b", str(model_dir), "--curves", "--split", "valid"]) == 0
    out = capsys.readouterr().out.split("Learning curves: ")[1]  # training printed its own tables before
    assert "settings A -> B: train.epochs 4 -> 2; train.eval_every 3 -> 1" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 2", "| 3", "| 4"]
    validated = [r.split(" | ")[3] != "" for r in rows]
    assert validated == [True, False, True, True], rows


def test_a_share_prints_the_same_digits_from_counts_or_from_its_fraction():
    from decimal import ROUND_HALF_UP, Decimal

    from hlgt.metrics import percent

    assert percent(23 / 80) == percent(0.2875) == "28.8" and percent(7 / 2000) == "0.4"
    assert [percent(x) for x in (0.0, 1 / 3, 2 / 3, 1.0)] == ["0.0", "33.3", "66.7", "100.0"]
    assert [percent(x, sign=True) for x in (-5 / 80, 5 / 80, 0.0)] == ["-6.3", "+6.3", "+0.0"]
    assert percent(0.125, digits=0) == "13"
    for n in (80, 160, 384, 400, 1000, 1921):  # every share of these counts, some of which end in a half
        for k in range(n + 1):
            exact = (Decimal(100 * k) / n).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
            assert percent(k / n) == f"{exact}", (k, n)


def test_a_p_value_that_underflows_is_not_printed_as_zero():
    from hlgt.train.compare import mcnemar_exact, p_text

    assert mcnemar_exact(0, 1100) == 0.0 and p_text(mcnemar_exact(0, 1100)) == "< 1e-300"
    assert [p_text(p) for p in (1.0, 0.012, 0.00039, 3.4e-322, float("nan"))] == [
        "1", "0.012", "0.00039", "< 1e-300", "n/a"]

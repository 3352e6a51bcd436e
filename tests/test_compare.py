"""Paired comparison of runs: counts, the exact McNemar p, pooling, the errors that keep two
different problem sets from being compared, and two runs' learning curves side by side."""
import json
import math

import pytest
import torch

from hlgt.commands.compare import main
from hlgt.train.compare import chi2_sf, cochran_q, compare, curve, curves, latest_checkpoint, mcnemar_exact


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


def test_pairs_by_problem_id_and_pools(tmp_path):
    a0 = write(tmp_path / "a0" / "predictions_test.jsonl", [("x", True, True), ("y", True, False), ("z", False, False)])
    b0 = write(tmp_path / "b0" / "predictions_test.jsonl", [("z", True, True), ("y", True, True), ("x", False, False)])
    a1 = write(tmp_path / "a1" / "predictions_test.jsonl", [("u", True, True), ("v", True, True)])
    b1 = write(tmp_path / "b1" / "predictions_test.jsonl", [("u", True, False), ("v", False, False)])
    rows = compare([a0.parent, a1.parent / "best"], [b0, b1.parent])
    assert [(r.n, r.right_a, r.right_b, r.only_a, r.only_b) for r in rows] == [
        (3, 2, 2, 1, 1), (2, 2, 1, 1, 0), (5, 4, 3, 2, 1)]
    assert rows[0].label == "a0 / b0" and rows[-1].label == "pooled"
    equation = compare([a0], [b0], metric="equation")
    assert [(r.right_a, r.right_b, r.only_a, r.only_b) for r in equation] == [(1, 2, 1, 2)]


def test_different_problems_or_counts_are_errors(tmp_path):
    a = write(tmp_path / "a.jsonl", [("x", True, True), ("y", True, True)])
    b = write(tmp_path / "b.jsonl", [("x", True, True), ("w", True, True)])
    with pytest.raises(ValueError, match="different problems"):
        compare([a], [b])
    with pytest.raises(ValueError, match="paired by position"):
        compare([a, a], [a])
    with pytest.raises(FileNotFoundError, match="has the run finished"):
        compare([tmp_path / "unfinished"], [a])
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
    the trainer state (validation on the epochs in ``epochs[e]``'s "val" entry) and the config.
    ``ray_times``: Ray Train's ``checkpoint_<time>`` folders instead of ``checkpoint``, the last
    one holding every epoch, the earlier ones the epochs before."""
    history = [{"epoch": e, "train/tree_loss": loss, "val/value_acc": val[0], "val/equation_acc": val[1],
                **({"val/tree_loss": 0.5} if validated else {})} for e, loss, val, validated in epochs]
    folders = [f"checkpoint_{t}" for t in ray_times] or ["checkpoint"]
    for n, name in enumerate(folders, 1):
        (path / name).mkdir(parents=True)
        kept = history if n == len(folders) else history[: len(history) - len(folders) + n]
        torch.save({"epoch": len(kept), "history": kept, "optimizer": {}}, path / name / "trainer_state.pt")
        (path / name / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    return path


def test_curves_side_by_side_with_the_settings_that_differ(tmp_path):
    a = run_folder(tmp_path / "full-seed2", [(1, 1.2834, (0.335, 0.295), True), (2, 0.8346, (0.335, 0.295), False),
                                              (3, 0.6842, (0.5, 0.45), True)],
                   {"model.ablation": "full", "train.seed": 2, "train.threads": 2})
    b = run_folder(tmp_path / "gts-seed2", [(1, 1.3, (0.3, 0.25), True), (2, 0.9, (0.3, 0.25), False)],
                   {"model.ablation": "gts", "train.seed": 2, "train.threads": 1},
                   ray_times=("2026-12-01_10-00-00.000001", "2026-12-01_11-00-00.000001"))
    assert latest_checkpoint(b).name == "checkpoint_2026-12-01_11-00-00.000001"  # the newest, by its time
    assert [m["epoch"] for m in curve(b / "best").history] == [1, 2]  # a model folder names its run
    text = curves([a], [b])
    # threads say how a run ran, not what it trained: left out of the settings that differ.
    assert text.startswith("Learning curves: A full-seed2, B gts-seed2; settings A -> B: "
                           "model.ablation 'full' -> 'gts'\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows == ["| 1 | 1.283 | 1.300 | 33.5% / 29.5% | 30.0% / 25.0% |",
                    "| 2 | 0.835 | 0.900 |  |  |",  # no validation that epoch: its carried-over values are not shown
                    "| 3 | 0.684 | – | 50.0% / 45.0% | – |"]  # B has not trained epoch 3 (yet)
    assert "none differ" in curves([a], [a])
    with pytest.raises(ValueError, match="paired by position"):
        curves([a, a], [b])
    predictions = write(tmp_path / "p.jsonl", [("x", True, True)])
    for not_a_run in (predictions, tmp_path / "empty"):
        with pytest.raises(FileNotFoundError, match="learning curves are read from run folders"):
            curves([not_a_run], [b])


def test_command_shows_curves_of_runs_still_training(tmp_path, capsys):
    a = run_folder(tmp_path / "a", [(1, 1.0, (0.2, 0.1), True)], {"model.ablation": "full"})
    b = run_folder(tmp_path / "b", [(1, 1.1, (0.1, 0.1), True)], {"model.ablation": "gts"})
    assert main(["--a", str(a), "--b", str(b), "--curves"]) == 0
    out = capsys.readouterr().out
    assert "no paired counts yet" in out and "| 1 | 1.000 | 1.100 | 20.0% / 10.0% | 10.0% / 10.0% |" in out
    with pytest.raises(FileNotFoundError, match="has the run finished"):
        main(["--a", str(a), "--b", str(b)])  # without --curves an unfinished run is still an error


def test_curves_of_a_trained_run(model_dir, capsys):
    """The curves read what the training loop writes: its checkpoint's history and config."""
    run = model_dir.parent
    assert main(["--a", str(run), "--b", str(model_dir), "--curves", "--split", "valid"]) == 0
    out = capsys.readouterr().out
    assert "| 0 / 0 | 1 |" in out  # a run against itself
    assert "settings A -> B: none differ" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 2"]
    assert all(r.count("%") == 4 for r in rows)  # the first and the last epoch validate


def test_a_damaged_checkpoint_is_a_clear_error(tmp_path):
    run = run_folder(tmp_path / "run", [(1, 1.0, (0.2, 0.1), True)], {})
    state = run / "checkpoint" / "trainer_state.pt"
    for damage in (lambda: state.write_bytes(b"not a torch file"),
                   lambda: torch.save({"history": [1, 2]}, state),
                   lambda: torch.save({"epoch": 1}, state)):
        damage()
        with pytest.raises(ValueError, match="not a checkpoint written by hlgt's training"):
            curve(run)

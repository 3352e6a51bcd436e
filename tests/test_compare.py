"""Paired comparison of runs: counts, the exact McNemar p, pooling, and the errors that keep two
different problem sets from being compared."""
import json
import math

import pytest

from hlgt.commands.compare import main
from hlgt.train.compare import chi2_sf, cochran_q, compare, mcnemar_exact


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

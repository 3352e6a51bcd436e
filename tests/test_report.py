"""The data report: a table per dataset and split, exit 0, missing files reported not raised."""
import re

import pytest

from hlgt.commands.report import main


def _row(out: str, label: str) -> list[str]:
    (line,) = [ln for ln in out.splitlines() if re.match(rf"\s+{re.escape(label)}\s+\d", ln)]
    return line.split()


def test_report_on_the_sample(capsys):
    assert main(["--dataset", "sample"]) == 0
    out = capsys.readouterr().out
    assert "== sample ==" in out
    train = _row(out, "train")
    assert train[1:6] == ["74", "0", "74", "74", "100.00%"]
    assert "kept, prefix None: rare_constant=2" in out  # the two 3.14 test problems
    assert "constants (min_const_freq=5): 1 100" in out


def test_missing_files_are_reported_not_raised(tmp_path, capsys):
    (tmp_path / "ape210k").mkdir()
    (tmp_path / "ape210k" / "valid.ape.json").write_text(
        '{"id": "1", "segmented_text": "有 3 个", "original_text": "有3个", "equation": "x=3", "ans": "3"}\n'
        '{"id": "2", "segmented_text": "有 3 个", "original_text": "有3个", "equation": "x=3", "ans": "??"}\n'
        "not json\n",
        encoding="utf-8",
    )
    assert main(["--data-dir", str(tmp_path), "--dataset", "ape210k"]) == 0
    out = capsys.readouterr().out
    assert "train            not read: ape210k train file not found" in out
    row = _row(out, "valid (as train)")
    assert row[3:8] == ["3", "1", "2", "1", "50.00%"]
    assert "dropped: unreadable_answer=1; reader skipped: malformed_json=1" in out
    assert main(["--data-dir", str(tmp_path), "--dataset", "math23k"]) == 1  # named, nothing readable


def test_missing_data_dir_exits_2(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path / "none"), "--dataset", "math23k"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.realdata
def test_report_on_real_math23k(capsys, real_data):
    assert main(["--data-dir", str(real_data), "--dataset", "math23k"]) == 0
    out = capsys.readouterr().out
    assert _row(out, "train")[1:5] == ["21162", "0", "21162", "21152"]
    assert _row(out, "valid")[1:5] == ["1000", "0", "1000", "1000"]
    assert _row(out, "test")[1:5] == ["1000", "0", "1000", "1000"]


@pytest.mark.realdata
@pytest.mark.parametrize("scheme,seen", [("grouped", "0"), ("graph2tree", "74")])
def test_report_on_real_mawps_counts_test_texts_seen_in_training(capsys, scheme, seen, real_data):
    assert main(["--data-dir", str(real_data), "--dataset", "mawps", "--fold", "0", "--mawps-folds", scheme]) == 0
    out = capsys.readouterr().out
    assert f"text is in train or valid ({scheme} folds): {seen}\n" in out


def test_bad_numbers_are_refused_naming_the_option_and_the_command(capsys):
    with pytest.raises(SystemExit):
        main(["--max-tokens", "0"])
    assert "hlgt-report: error: argument --max-tokens: must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("fold", ["x", "5", "-1"])
def test_a_fold_that_is_not_one_of_mawps_is_refused_naming_the_option(fold, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--dataset", "mawps", "--fold", fold])
    assert stop.value.code == 2
    assert f"argument --fold: invalid choice: '{fold}'" in capsys.readouterr().err


def test_an_odd_record_is_one_named_skip_and_the_file_is_reported(tmp_path, capsys):
    (tmp_path / "ape210k").mkdir()
    good = '{"id": "1", "segmented_text": "有 3 个", "original_text": "有3个", "equation": "x=3", "ans": "3"}'
    path = tmp_path / "ape210k" / "valid.ape.json"
    path.write_text("\n".join([
        good,
        '{"id": "2", "segmented_text": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"id": "3", "segmented_text": "有 3 个", "equation": "x=3", "ans": ' + "9" * 5000 + "}",
        '{"id": "4", "segmented_text": "有\u2028 3 个\u0085", "original_text": "有3个", "equation": "x=3", "ans": "3"}',
    ]) + "\n", encoding="utf-8")
    assert main(["--data-dir", str(tmp_path), "--dataset", "ape210k"]) == 0
    out = capsys.readouterr().out
    assert _row(out, "valid (as train)")[3:6] == ["4", "2", "2"]
    assert "reader skipped: nested_too_deep=1 number_too_long=1" in out
    assert f"{path}:2: nested_too_deep" in out and f"{path}:3: number_too_long" in out

"""Scoring on hand-made predictions: value and equation accuracy, Table-4 buckets, predictions
file; the command on a model trained briefly on the sample data (``model_dir``, tests/conftest.py)."""
import json

import pytest

from hlgt.config import Config
from hlgt.data.build import shards_path
from hlgt.data.shards import load_rows
from hlgt.inference import load_model
from hlgt.train.evaluate import (
    NUMBER_BUCKETS,
    main,
    number_bucket,
    read_predictions,
    score,
    summarise,
    table4_csv,
    table4_markdown,
    write_report,
)


def row(id, values, texts, prefix, answer, text="a problem"):
    return {"id": id, "text": text, "num_values": values, "num_texts": texts, "prefix": prefix, "answer": answer}


ROWS = [
    # 1 number; exact prediction
    row("a", [5.0], ["5"], ["*", "N0", "2"], 10.0),
    # 2 numbers; commuted: value right, equation wrong
    row("b", [3.0, 4.0], ["3", "4"], ["+", "N0", "N1"], 7.0),
    # 3 numbers; wrong value
    row("c", [1.0, 2.0, 3.0], ["1", "2", "3"], ["-", "N2", "N0"], 2.0),
    # 3 numbers; malformed prediction
    row("d", [1.0, 2.0, 3.0], ["1", "2", "3"], ["+", "N0", "N1"], 3.0),
    # 8 numbers; gold equation not representable, value right
    row("e", [float(i) for i in range(8)], [str(i) for i in range(8)], None, 7.0),
    # 2 numbers: fraction and percentage written as in the text
    row("f", [0.4, 0.2], ["(2/5)", "20%"], ["*", "N0", "N1"], 0.08),
]
PREDICTIONS = [
    ["*", "N0", "2"],
    ["+", "N1", "N0"],
    ["-", "N2", "N1"],
    ["+", "N0"],
    ["N7"],
    ["*", "N0", "N1"],
]


@pytest.fixture
def scored():
    return [score(r, p) for r, p in zip(ROWS, PREDICTIONS)]


def test_each_verdict(scored):
    verdicts = {s.id: (s.value_correct, s.equation_correct) for s in scored}
    assert verdicts == {
        "a": (True, True),
        "b": (True, False),
        "c": (False, False),
        "d": (False, False),
        "e": (True, False),
        "f": (True, True),
    }
    d = next(s for s in scored if s.id == "d")
    assert d.predicted_value is None and "lacks operands" in d.error


def test_accuracies_and_buckets(scored):
    report = summarise(scored)
    assert report.n == 6
    assert report.value_acc == pytest.approx(4 / 6)
    assert report.equation_acc == pytest.approx(2 / 6)
    by = {r.bucket: r for r in report.by_numbers}
    assert [r.bucket for r in report.by_numbers] == list(NUMBER_BUCKETS)
    assert (by["<=1"].count, by["2"].count, by["3"].count, by[">=7"].count) == (1, 2, 2, 1)
    assert by["4"].count == by["5"].count == by["6"].count == 0
    assert by["2"].proportion == pytest.approx(2 / 6)
    assert by["2"].value_acc == 1.0 and by["2"].equation_acc == 0.5
    assert by["3"].value_acc == 0.0
    assert sum(r.proportion for r in report.by_numbers) == pytest.approx(1.0)


def test_bucket_edges():
    assert [number_bucket(n) for n in (0, 1, 2, 6, 7, 30)] == ["<=1", "<=1", "2", "6", ">=7", ">=7"]


def test_empty_split_is_an_error():
    with pytest.raises(ValueError, match="no problems"):
        summarise([])


def test_predictions_file_and_tables(tmp_path, scored):
    report = summarise(scored)
    paths = write_report(tmp_path, "test", report, scored)
    records = read_predictions(paths["predictions"])
    assert [r["id"] for r in records] == [r["id"] for r in ROWS]
    f = records[-1]
    assert f["predicted"] == "(2/5)*20%" and f["gold"] == "(2/5)*20%"
    assert f["values"] == [0.4, 0.2] and f["value_correct"] is True and f["equation_correct"] is True
    assert records[4]["gold"] == "" and records[4]["gold_prefix"] is None
    json.dumps(records)  # plain JSON all the way down
    md = paths["table_md"].read_text()
    assert "| 2 | 2 | 33.3% | 100.0% | 50.0% |" in md and "| all | 6 | 100.0% | 66.7% | 33.3% |" in md
    assert table4_markdown(report) in md
    lines = table4_csv(report).splitlines()
    assert lines[0] == "numbers,problems,proportion,value_acc,equation_acc" and len(lines) == 9


@pytest.mark.parametrize("bf16", [False, True])
def test_cli_scores_a_split_from_the_model_folder(model_dir, tmp_path, capsys, bf16):
    assert main(["--model", str(model_dir), "--split", "test", "--out", str(tmp_path)]
                + (["--bf16"] if bf16 else [])) == 0
    out = capsys.readouterr().out
    predictions = read_predictions(tmp_path / "predictions_test.jsonl")
    solver, flat = load_model(model_dir)
    test_rows = load_rows(shards_path(Config.from_flat({k: v for k, v in flat.items() if k.startswith("data.")})), "test")
    assert [p["id"] for p in predictions] == [str(r["id"]) for r in test_rows]
    value_acc = sum(p["value_correct"] for p in predictions) / len(predictions)
    assert f"value accuracy {100 * value_acc:.1f}%" in out and ("bfloat16" in out) == bf16
    assert (tmp_path / "numbers_test.md").is_file()
    assert solver.cfg.bf16_inference is False  # --bf16 is the command's setting, not written into the model


def test_cli_takes_no_abbreviated_option(capsys):
    with pytest.raises(SystemExit):
        main(["--model", "m", "--data", "problems.json"])  # not --data-dir
    assert "unrecognized arguments: --data problems.json" in capsys.readouterr().err

"""Scoring on hand-made predictions: value and equation accuracy, Table-4 buckets, predictions file."""
import json

import pytest

from hlgt.train.evaluate import (
    NUMBER_BUCKETS,
    infix_with_numbers,
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


def test_infix_substitutes_numbers():
    assert infix_with_numbers(["*", "-", "N0", "1", "N1"], ["11", "2"]) == "(11-1)*2"
    assert infix_with_numbers(["*", "N0", "N1"], ["(2/5)", "20%"]) == "(2/5)*20%"
    assert infix_with_numbers(["+", "N0"], ["1"]) == "+ N0"  # malformed stays readable
    assert infix_with_numbers(None, []) == ""


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


def test_predict_decodes_by_length_but_returns_row_order(monkeypatch):
    """Batches are formed by text length; every prediction still lands on its own row."""
    import torch

    from hlgt.data import collate as collate_module
    from hlgt.train import evaluate as evaluate_module
    from hlgt.train.evaluate import predict

    rows = [{"id": str(i), "tokens": ["w"] * n} for i, n in enumerate([9, 2, 7, 1, 5, 3, 8])]
    seen_batches = []

    def fake_collate(chunk, vocab, variant):
        seen_batches.append([len(r["tokens"]) for r in chunk])
        return type("B", (), {"ids": [r["id"] for r in chunk], "to": lambda self, device: self})()

    beam_batches = []

    class EchoSolver(torch.nn.Module):
        def solve(self, batch, beam_size, beam_batch):
            beam_batches.append(beam_batch)
            return [[f"N{b}"] for b in batch.ids]  # the row's own id, to check placement

    monkeypatch.setattr(collate_module, "collate", fake_collate)
    out = predict(EchoSolver(), rows, vocab=None, variant="srl", beam_size=1, batch_size=3)
    assert out == [[f"N{i}"] for i in range(len(rows))]
    assert seen_batches == [[1, 2, 3, 5, 7, 8, 9]] and beam_batches == [6]  # one encoder batch of up to 4 x 3
    seen_batches.clear()
    monkeypatch.setattr(evaluate_module, "ENCODE_BATCHES", 1)
    out = predict(EchoSolver(), rows, vocab=None, variant="srl", beam_size=1, batch_size=3)
    assert out == [[f"N{i}"] for i in range(len(rows))]
    assert seen_batches == [[1, 2, 3], [5, 7, 8], [9]]

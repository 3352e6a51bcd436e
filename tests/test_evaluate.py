"""Scoring on hand-made predictions: value and equation accuracy, Table-4 buckets, predictions
file; the command on a model trained briefly on the sample data (``model_dir``, tests/conftest.py)."""
import json
import shutil
from pathlib import Path

import pytest

from hlgt.commands.evaluate import main
from hlgt.config import Config
from hlgt.data.build import shards_path
from hlgt.data.shards import load_rows
from hlgt.inference import load_model
from hlgt.train.evaluate import (
    NUMBER_BUCKETS,
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


def test_equation_read_as_written():
    """GTS's rule: where two quantities are the same number, either is the gold equation's."""
    same = row("g", [6.0, 2.0, 6.0], ["6", "2", "6"], ["-", "N0", "N1"], 4.0)
    assert score(same, ["-", "N2", "N1"]).equation_correct
    assert not score(same, ["-", "N1", "N0"]).equation_correct
    written_apart = row("h", [0.5, 2.0, 0.5], ["0.5", "2", "(1/2)"], ["*", "N0", "N1"], 1.0)
    verdict = score(written_apart, ["*", "N2", "N1"])
    assert verdict.value_correct and not verdict.equation_correct


def test_a_prediction_evaluates_exactly_as_solve_evaluates_it():
    # In floats 5.3 - 2.1 - 3.2 is -4.4e-16, and 1 / that a "value" of -2.25e15.
    exact = row("e", [5.3, 2.1, 3.2], ["5.3", "2.1", "3.2"], ["-", "-", "N0", "N1", "N2"], 0.0)
    assert score(exact, ["-", "-", "N0", "N1", "N2"]).predicted_value == 0.0
    divided = score(exact, ["/", "1", "-", "-", "N0", "N1", "N2"])
    assert divided.predicted_value is None and "division by zero" in divided.error and not divided.value_correct


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
    # A bucket without problems has no accuracy to show, not 0%.
    assert "| 6 | 0 | 0.0% | – | – |" in md and "6,0,0.000000,," in lines


@pytest.mark.parametrize("bf16", [False, True])
def test_cli_scores_a_split_from_the_model_folder(model_dir, tmp_path, capsys, bf16):
    assert main(["--model", str(model_dir), "--split", "test", "--out", str(tmp_path)]
                + (["--bf16"] if bf16 else [])) == 0
    out = capsys.readouterr().out
    predictions = read_predictions(tmp_path / "predictions_test.jsonl")
    solver, flat = load_model(model_dir)
    test_rows = load_rows(shards_path(Config.from_flat({k: v for k, v in flat.items() if k.startswith("data.")})),
                          "test")
    assert [p["id"] for p in predictions] == [str(r["id"]) for r in test_rows]
    value_acc = sum(p["value_correct"] for p in predictions) / len(predictions)
    assert f"value accuracy {100 * value_acc:.1f}%" in out and ("bfloat16" in out) == bf16
    assert (tmp_path / "numbers_test.md").is_file()
    assert solver.cfg.bf16_inference is False  # --bf16 is the command's setting, not written into the model


def test_cli_decodes_as_the_model_says_unless_told(model_dir, tmp_path, capsys):
    # A model saved with model.bf16_inference decodes so, as solve and training's own test do;
    # --no-bf16 turns it off for this command.
    folder = tmp_path / "bf16-model"
    shutil.copytree(model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model.bf16_inference": True}))
    run = json.loads((folder / "run_config.json").read_text())
    run["config"]["model.bf16_inference"] = True
    (folder / "run_config.json").write_text(json.dumps(run))
    assert main(["--model", str(folder), "--split", "test"]) == 0
    assert "bfloat16 GRU products" in capsys.readouterr().out
    assert main(["--model", str(folder), "--split", "test", "--no-bf16"]) == 0
    assert "float32 GRU products" in capsys.readouterr().out


def test_cli_takes_no_abbreviated_option(capsys):
    with pytest.raises(SystemExit):
        main(["--model", "m", "--data-d", "problems"])  # not --data-dir
    assert "unrecognized arguments: --data-d problems" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model", "m", "--data", "f.json", "--split", "test"])
    assert "--data evaluates a file" in capsys.readouterr().err


@pytest.mark.parametrize("option, value, message", [
    ("--batch-size", "0", "must be >= 1, got 0"),
    ("--beam-size", "0", "must be >= 1, got 0"),  # not read as "the model's"
    ("--threads", "-2", "must be >= 0, got -2"),
    ("--device", "foo", "not a torch device: 'foo'"),
])
def test_cli_refuses_a_bad_number_or_device_naming_its_option(capsys, option, value, message):
    with pytest.raises(SystemExit) as stop:
        main(["--model", "m", option, value])
    assert stop.value.code == 2 and f"argument {option}: {message}" in capsys.readouterr().err


def test_cli_refuses_cuda_on_a_machine_without_it(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit):
        main(["--model", "m", "--device", "cuda"])
    assert "argument --device: 'cuda' asked for, but torch sees no CUDA device here" in capsys.readouterr().err


def _problem_file(path, records, layout):
    if layout == "math23k":  # pretty-printed objects one after another
        text = "".join(json.dumps(r, ensure_ascii=False, indent=4) + "\n" for r in records)
    elif layout == "mawps":  # one JSON array
        text = json.dumps(records, ensure_ascii=False)
    else:  # ape210k and the generic format: JSON Lines
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("layout", ["math23k", "mawps", "ape210k", "generic"])
def test_cli_evaluates_a_file_the_model_was_not_trained_on(model_dir, tmp_path, capsys, layout):
    import hlgt.data.splits as splits

    lines = (splits.SAMPLE_DIR / "zh_test.json").read_text(encoding="utf-8").splitlines()
    sample = [json.loads(line) for line in lines]
    if layout == "generic":  # raw text, an equation or an answer
        records = [{"id": r["id"], "original_text": r["original_text"], **({"equation": r["equation"]} if i % 2
                    else {"ans": r["ans"]})} for i, r in enumerate(sample)]
    else:
        records = [dict(r) for r in sample]
    records += [{"id": "c", "segmented_text": "有 7 个 新 词汇 苹果", "original_text": "有7个新词汇苹果",
                 "equation": "x=7*1234", "ans": "8638"},  # a constant the model never learned
                {"id": "bad", "original_text": "没有 答案 3"}]  # neither equation nor answer
    path = _problem_file(tmp_path / f"transfer.{'json' if layout in ('math23k', 'mawps') else 'jsonl'}", records,
                         layout)
    assert main(["--model", str(model_dir), "--data", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    predictions = read_predictions(tmp_path / "out" / "predictions_transfer.jsonl")
    assert [p["id"] for p in predictions] == [r["id"] for r in records[:-1]]
    assert f"{len(records)} records: {len(records) - 1} scored, 1 not scored (missing_field 1)" in out
    assert "without a gold equation the model can write: " in out and "rare_constant" in out
    assert "Value accuracy over all" in out
    if layout == "generic":
        assert "no_equation" in out  # answer-only problems: scored by value
    # The table and the rate are over the problems scored, and say so.
    assert f"({len(records) - 1} problems scored, " in out and "problems/s end to end" in out
    saved = (tmp_path / "out" / "numbers_transfer.md").read_text()
    assert f"| all | {len(records) - 1} |" in saved
    assert f"Over the {len(records) - 1} problems scored; records not scored, not in this table: 1." in saved


def test_evaluating_a_file_that_has_no_scorable_problem_is_one_line(model_dir, tmp_path, capsys):
    from hlgt.commands.cli import run_command

    too_long = {"id": "x", "original_text": "A farmer has 3 apples" + " and pears" * 300 + ".", "ans": "3"}
    path = _problem_file(tmp_path / "empty.jsonl", [too_long], "generic")
    assert run_command(main, "evaluate", ["--model", str(model_dir), "--data", str(path)]) == 2
    assert "no problem can be scored (not scored: " in capsys.readouterr().err
    path.write_text('{"id": 1}\n[2]\n', encoding="utf-8")  # why, said: not only that none could be
    assert run_command(main, "evaluate", ["--model", str(model_dir), "--data", str(path)]) == 2
    err = capsys.readouterr().err
    assert "\n" not in err.strip() and "(not scored: missing_field 1, not_an_object 1); the first: " in err


def test_an_out_that_cannot_take_the_files_is_refused_before_the_model_is_loaded(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(NotADirectoryError, match=r"--out .*a-file/out: .*a-file is a file, not a folder"):
        main(["--model", str(tmp_path / "no-model"), "--data", "f.jsonl", "--out", str(tmp_path / "a-file" / "out")])


@pytest.mark.parametrize("kind", ["run", "sweep", "shards", "curve"])
def test_an_out_another_command_made_is_refused(tmp_path, kind):
    # A run's predictions_test.jsonl replaced by another model's would be compared as the run's.
    from hlgt.storage import claim

    claim(str(tmp_path / "made"), kind)
    with pytest.raises(ValueError, match=f"--out .*made is a {kind} folder: its files are that {kind}'s"):
        main(["--model", str(tmp_path / "no-model"), "--data", "f.jsonl", "--out", str(tmp_path / "made")])
    (tmp_path / "made" / "test").mkdir()  # a shard split, a run's best/: written into, it breaks them
    with pytest.raises(ValueError, match=f"--out .*made/test is inside .*made, which is a {kind} folder"):
        main(["--model", str(tmp_path / "no-model"), "--data", "f.jsonl", "--out", str(tmp_path / "made" / "test")])


@pytest.mark.parametrize("held", ["checkpoint/trainer_state.pt", "old-run/checkpoint/trainer_state.pt"])
def test_an_out_of_a_run_s_checkpoint_or_of_a_run_before_markers_is_refused(tmp_path, held):
    (tmp_path / held).parent.mkdir(parents=True)
    (tmp_path / held).touch()
    out = tmp_path / held.split("/")[0]
    with pytest.raises(ValueError, match="is a run folder: its files are that run's"):
        main(["--model", str(tmp_path / "no-model"), "--data", "f.jsonl", "--out", str(out)])


def test_an_out_beside_runs_and_files_named_like_checkpoints_is_taken(tmp_path):
    # Only a run's layout (a marker, a trainer state) makes a folder a run's, not a name.
    from hlgt.train.evaluate import check_out_folder

    (tmp_path / "runs" / "checkpoint_lr3e-4" / "checkpoint").mkdir(parents=True)  # a run so named, beside
    (tmp_path / "runs" / "checkpoint_lr3e-4" / "checkpoint" / "trainer_state.pt").touch()
    (tmp_path / "checkpoint_best.pt").touch()  # a file of the user's, above
    assert check_out_folder(str(tmp_path / "runs" / "eval")) == (tmp_path / "runs" / "eval").resolve()


def test_a_rewrite_cut_short_leaves_the_earlier_predictions(tmp_path, scored, monkeypatch):
    import hlgt.train.evaluate as E

    paths = write_report(tmp_path, "test", summarise(scored), scored)
    before = paths["predictions"].read_text(encoding="utf-8")
    calls = []

    def killed(s):
        calls.append(s)
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C or a kill halfway through the file
        return json.loads(json.dumps(s.__dict__))

    monkeypatch.setattr(E, "asdict", killed)
    with pytest.raises(KeyboardInterrupt):
        write_report(tmp_path, "test", summarise(scored), scored)
    assert paths["predictions"].read_text(encoding="utf-8") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["numbers_test.csv", "numbers_test.md",
                                                          "predictions_test.jsonl"]


def test_a_full_disk_names_the_file(tmp_path):
    """A write that fails (here past RLIMIT_FSIZE, as on a full disk) names the file it was writing."""
    import subprocess
    import sys

    script = f"""
import resource, signal, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_evaluate import ROWS, PREDICTIONS
from hlgt.train.evaluate import score, summarise, write_report
scored = [score(r, p) for r, p in zip(ROWS, PREDICTIONS)]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (600, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    write_report({str(tmp_path)!r}, "test", summarise(scored), scored)
except OSError as e:
    print(e)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    written = tmp_path / "predictions_test.jsonl"
    assert out.stdout.strip() == f"[Errno 27] File too large (writing {written})", out.stderr
    assert not list(tmp_path.glob(".*.partial"))


def test_a_file_of_odd_records_is_scored_around_them_naming_file_and_line(model_dir, tmp_path, capsys):
    good = {"id": "g", "original_text": "Tom has 5 pens and gives 3 away .", "equation": "x=5-3", "ans": "2"}
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join([
        json.dumps(good),
        '{"id": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"id": "n", "original_text": "a 3 b 4", "equation": "x=3+4", "ans": ' + "9" * 5000 + "}",
        json.dumps({**good, "id": "signs", "equation": "x=፩+3"}, ensure_ascii=False),
        json.dumps({**good, "id": "ans", "ans": "⓷"}, ensure_ascii=False),
        json.dumps({**good, "id": "ls", "original_text": "Tom has 5\u2028pens and\u2029gives 3\u0085away ."},
                   ensure_ascii=False),
        json.dumps({**good, "ans": None}),
    ]) + "\n", encoding="utf-8")
    assert main(["--model", str(model_dir), "--data", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    ids = [p["id"] for p in read_predictions(tmp_path / "out" / "predictions_odd.jsonl")]
    assert ids == ["g", "signs", "ls", "g#2"]
    assert ("7 records: 4 scored, 3 not scored (nested_too_deep 1, number_too_long 1, unreadable_answer 1); "
            "without a gold equation the model can write: unparseable_equation 1") in out
    for note in (f"{path}:2: nested_too_deep", f"{path}:3: number_too_long",
                 f"{path}:5: unreadable_answer (problem ans: cannot read answer '⓷')",
                 f"{path}:7: id 'g' repeats an earlier record's: read as 'g#2'"):
        assert f"[evaluate] {note}" in out


def test_a_file_is_prepared_a_chunk_at_a_time_with_the_same_rows(model_dir):
    import hlgt.data.splits as splits
    from hlgt.data.annotate import FileCounts, file_chunks

    path = splits.SAMPLE_DIR / "en_train.json"
    solver, flat = load_model(model_dir)
    small, whole = FileCounts(), FileCounts()
    chunks = list(file_chunks(path, solver.vocab.constants, "offline", "", small, size=8))
    (rows,) = list(file_chunks(path, solver.vocab.constants, "offline", "", whole))
    assert [len(c) for c in chunks[:-1]] == [8] * (len(chunks) - 1) and len(chunks) > 3
    assert [r for c in chunks for r in c] == rows
    assert (small.read.records, small.not_scored, small.unanswerable) == (whole.read.records, whole.not_scored,
                                                                           whole.unanswerable)


def test_a_files_raw_texts_are_read_in_the_language_given_as_solve_reads_them(model_dir, tmp_path):
    import json

    from hlgt.data.annotate import file_chunks

    path = tmp_path / "mixed.jsonl"
    records = [{"id": "a", "original_text": "Tom has 5 pens. He buys 3.", "ans": "8"},
               {"id": "b", "original_text": "840/6/70+630=?", "ans": "632"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    solver, _ = load_model(model_dir)

    def tokens(lang):
        rows = [r for chunk in file_chunks(path, solver.vocab.constants, "offline", lang=lang) for r in chunk]
        return {r["id"]: list(r["tokens"]) for r in rows}["b"]

    assert tokens(None)[:3] == ["840", "/", "6/70"]  # the file's language, English: a bare a/b is a fraction
    assert tokens("zh")[:5] == ["840", "/", "6", "/", "70"]  # a Math23K model's: a division


def test_evaluate_data_reads_the_file_in_the_models_language(model_dir, tmp_path, monkeypatch):
    import hlgt.commands.evaluate as command

    asked = []

    def chunks(*args, lang=None, **kwargs):
        asked.append(lang)
        return iter([])

    monkeypatch.setattr(command, "model_lang", lambda flat: "zh")  # as a Math23K model's
    monkeypatch.setattr(command, "file_chunks", chunks)
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps({"id": "a", "original_text": "Tom has 5 pens.", "ans": "5"}) + "\n")
    with pytest.raises(ValueError, match="no problem can be scored"):
        main(["--model", str(model_dir), "--data", str(path)])
    assert asked == ["zh"]

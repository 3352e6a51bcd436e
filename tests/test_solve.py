"""Solving new problems: tokenising raw text, and the CLI on a model trained briefly on the sample
data (``model_dir``, tests/conftest.py)."""
import json
import math
from pathlib import Path

import pytest

from hlgt.commands.solve import main
from hlgt.expr import infix_to_prefix, tokenize_infix
from hlgt.solve import read_requests, solve_text, tokenize

ZH = "一根绳子长12米，用去了(1/4)，还剩多少米？"
EN = "A farmer has 120 apples. He sells 3/4 of them. How many apples does he sell?"


def test_chinese_numbers_stay_whole():
    tokens = tokenize("商店运来苹果1,200.5千克，卖了35%，又运来(1/5)和1(5/6)吨，比是3:7。", "zh")
    for number in ("1,200.5", "35%", "(1/5)", "1(5/6)", "3:7"):
        assert number in tokens
    assert "".join(tokens) == "商店运来苹果1,200.5千克，卖了35%，又运来(1/5)和1(5/6)吨，比是3:7。"


def test_chinese_is_segmented_as_math23k_writes_it():
    # Numerals are words where the text has numbers; a bare a/b is a division; digits after a
    # Latin letter stay in their word; a minus is an operator; no words guessed beyond jieba's
    # dictionary (its HMM would join 张明 and 两人).
    assert tokenize("第二天两人看了24页，吃了一半", "zh") == \
        ["第二天", "两", "人", "看", "了", "24", "页", "，", "吃", "了", "一半"]
    assert tokenize("张明有120元钱，买书用去80%", "zh") == \
        ["张", "明", "有", "120", "元", "钱", "，", "买", "书", "用", "去", "80%"]
    assert tokenize("剩下的2/3，一台MP3卖100元，面积0.09m2，-5", "zh") == \
        ["剩下", "的", "2", "/", "3", "，", "一台", "MP3", "卖", "100", "元", "，", "面积", "0.09", "m2", "，", "-",
         "5"]


def test_english_is_split_as_mawps_writes_it():
    # A minus after no word is a sign; ordinals and words with digits are one token each; clitics
    # are words of their own; a title keeps its period.
    assert tokenize("Katie's mp3 had -2 songs on the 3rd day, 5-3 or (7)-1.", "en") == \
        ["Katie", "'s", "mp3", "had", "-2", "songs", "on", "the", "3rd", "day", ",", "5", "-", "3", "or", "(", "7",
         ")", "-", "1", "."]
    assert tokenize("Mrs. Hilt doesn't know Sue’s 2 cats.", "en") == \
        ["Mrs.", "Hilt", "does", "n't", "know", "Sue", "’s", "2", "cats", "."]


def test_a_decimal_without_its_leading_zero_reads_as_the_files_write_it():
    assert tokenize("It costs .5 dollars, or $.75.", "en") == ["It", "costs", "0.5", "dollars", ",", "or", "$",
                                                              "0.75", "."]
    assert tokenize("共有 .25千克", "zh") == ["共有", "0.25", "千克"]
    # A period after a word ends its sentence, as in Math23K's texts.
    assert tokenize("每小时行50千米.7小时到达", "zh")[5:8] == [".", "7", "小时"]
    assert tokenize("共有.25千克", "zh")[1:3] == [".", "25"]


def test_a_percent_sign_typed_apart_joins_its_number_in_chinese_as_the_files_write_it():
    assert tokenize("打了 50 % 的折扣", "zh")[2] == "50%" and tokenize("a 5 % rise", "en")[1:3] == ["5", "%"]


def test_chinese_numerals_before_a_measure_word_are_the_quantities_of_a_text_without_numbers():
    assert tokenize("小明有三个苹果，吃了一半", "zh")[2:6] == ["有", "3", "个", "苹果"]
    assert "(1/2)" in tokenize("小明有三个苹果，吃了一半", "zh")
    assert tokenize("十二本书", "zh")[0] == "12" and tokenize("三百零五米", "zh")[0] == "305"
    assert "3.5" in tokenize("小明买了三点五千克苹果", "zh") and tokenize("两点钟到", "zh")[0] != "2"
    assert tokenize("两千克苹果", "zh")[:2] == ["2", "千克"] and tokenize("两千个人", "zh")[0] == "2000"
    assert tokenize("每千克5元", "zh") == ["每千克", "5", "元"] and "1" not in tokenize("一根绳子长12米", "zh")
    assert not any(t.isdigit() for t in tokenize("一些人一起来，十分好看", "zh"))


@pytest.mark.parametrize("text", ["小明很开心。", "🍎🍎🍎", "How many are there?"])
def test_a_text_without_quantities_is_refused(model_dir, text):
    with pytest.raises(ValueError, match="no quantities found"):
        solve_text(model_dir, text)


@pytest.mark.parametrize("text, message", [
    ("A farmer counts " + " ".join(str(i) for i in range(1, 301)) + " apples. How many?", "300 quantities"),
    ("Tom has 3 apples " + "and a pear " * 200 + ". How many?", "tokens; the model reads at most 512"),
    ("小明有3个苹果" + "很好" * 6000, "characters"),
])
def test_a_text_over_the_limits_is_refused_quickly(model_dir, text, message):
    # 300 quantities once took 6.8 GB and a crash: the graph grows with their cube.
    import time
    import tracemalloc

    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        solve_text(model_dir, text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - started < 30 and peak < 200e6


def test_english_splits_punctuation():
    assert tokenize("He sells 3/4 of 1,200 apples, i.e. 75%.", "en") == \
        ["He", "sells", "3/4", "of", "1,200", "apples", ",", "i", ".", "e", ".", "75%", "."]
    with pytest.raises(ValueError, match="language"):
        tokenize("x", "fr")


@pytest.mark.parametrize("text,lang,numbers", [(ZH, "zh", ["12", "(1/4)"]), (EN, "en", ["120", "3/4"])])
def test_solve_text(model_dir, text, lang, numbers):
    s = solve_text(model_dir, text)
    assert s.lang == lang and s.numbers == numbers
    assert s.prefix and infix_to_prefix(tokenize_infix(s.equation))  # a readable infix equation (raises if not)
    assert s.answer is not None and math.isfinite(s.answer)


def test_cli_prints_equation_and_answer(model_dir, capsys):
    for text in (ZH, EN):
        assert main(["--model", str(model_dir), text]) == 0
        out = capsys.readouterr().out
        assert "equation: x = " in out and "answer:   " in out


def test_digits_that_are_no_quantity_are_named(model_dir, tmp_path, capsys):
    text = "Tom has 12345678901234567 apples and 3/0 pears and 4 plums . How many fruits ?"
    assert solve_text(model_dir, text).not_read == ["12345678901234567", "3/0"]
    assert solve_text(model_dir, EN).not_read == []
    assert main(["--model", str(model_dir), text]) == 0
    assert "not read: 12345678901234567, 3/0 (digits, but no quantity" in capsys.readouterr().out
    problems, out = tmp_path / "p.jsonl", tmp_path / "a.jsonl"
    problems.write_text(json.dumps({"text": text}) + "\n" + json.dumps({"text": EN}) + "\n")
    assert main(["--model", str(model_dir), "--file", str(problems), "--out", str(out)]) == 0
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    assert answers[0]["not_read"] == ["12345678901234567", "3/0"] and "not_read" not in answers[1]


def test_cli_needs_a_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="must be a model folder written by training"):
        solve_text(tmp_path, EN)


def test_cli_takes_no_abbreviated_option(capsys):
    with pytest.raises(SystemExit):
        main(["--model", "m", "--beam", "3", EN])  # not --beam-size
    assert "unrecognized arguments: --beam" in capsys.readouterr().err


def test_a_file_of_problems_is_solved_in_order_with_an_error_entry_per_bad_line(model_dir, tmp_path, capsys):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join([
        json.dumps({"id": "a", "text": ZH}, ensure_ascii=False),
        "{not json",
        json.dumps({"id": "b", "text": "小明很开心。"}, ensure_ascii=False),  # no quantities
        "",
        json.dumps({"text": EN}),  # no id: the line number
        json.dumps({"id": "c"}),  # no text
        json.dumps({"id": "d", "original_text": EN}),  # a dataset's record: its text is read
    ]) + "\n", encoding="utf-8")
    out = tmp_path / "answers.jsonl"
    assert main(["--model", str(model_dir), "--file", str(problems), "--out", str(out)]) == 0
    answers = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [a["id"] for a in answers] == ["a", "2", "b", "5", "c", "d"]
    assert set(answers[0]) >= {"id", "equation", "answer"} or "does not evaluate" in answers[0]["error"]
    assert "not JSON" in answers[1]["error"] and "no quantities" in answers[2]["error"]
    assert "equation" in answers[3] and '"text" (or "original_text"' in answers[4]["error"]
    assert {k: answers[5][k] for k in ("equation", "answer")} == {k: answers[3][k] for k in ("equation", "answer")}
    assert "[solve] " in capsys.readouterr().out and sorted(p.name for p in tmp_path.iterdir()) == [
        "answers.jsonl", "problems.jsonl"]  # no temporary file left
    # The same problem alone and in the file: the same equation (batching changes nothing).
    alone = solve_text(model_dir, ZH)
    assert answers[0]["equation"] == f"x = {alone.equation}"


def test_file_and_text_are_one_or_the_other(capsys):
    for argv in (["--model", "m"], ["--model", "m", "--file", "f.jsonl"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "give a problem text, or --file FILE with --out FILE" in capsys.readouterr().err
    for argv in (["--model", "m", "--out", "o.jsonl", "x"], ["--model", "m", "--file", "f", "--out", "o", "x"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "--file and --out go together" in capsys.readouterr().err


def test_a_beam_of_zero_or_beyond_the_config_s_limit_is_refused(capsys):
    from hlgt.commands.evaluate import main as evaluate

    with pytest.raises(SystemExit):
        main(["--model", "m", "--beam-size", "0", EN])
    assert "argument --beam-size: must be >= 1, got 0" in capsys.readouterr().err
    for command, argv in ((main, [EN]), (evaluate, [])):  # before torch tries to allocate it
        with pytest.raises(SystemExit):
            command(["--model", "m", "--beam-size", "100000000000", *argv])
        assert "argument --beam-size: must be at most 256 (model.beam_size)" in capsys.readouterr().err


@pytest.mark.parametrize("out, message", [
    ("problems.jsonl", "is the --file itself"),
    (".", "is a folder"),
    ("missing/answers.jsonl", "there is no folder"),
])
def test_an_out_that_cannot_take_the_answers_is_refused_before_solving(tmp_path, monkeypatch, out, message):
    monkeypatch.chdir(tmp_path)
    Path("problems.jsonl").write_text(json.dumps({"text": EN}) + "\n", encoding="utf-8")
    # No model folder: the refusal comes before the model is loaded.
    with pytest.raises(OSError if message != "is the --file itself" else ValueError, match=message):
        main(["--model", "no/model", "--file", "./problems.jsonl", "--out", out])


def test_a_file_that_is_not_text_is_named(tmp_path):
    shard = tmp_path / "shard.parquet"
    shard.write_bytes(b"PAR1\xff\xfe\x00")
    with pytest.raises(ValueError, match=f"cannot read {shard}: not UTF-8"):
        read_requests(shard)


def test_a_text_is_read_in_the_language_of_the_models_dataset(model_dir, tmp_path):
    # Pure arithmetic has no language of its own: a Math23K model reads it as Chinese (2/3 a
    # division); the sample data has both languages, so there the text's guess decides.
    import shutil

    math23k = tmp_path / "best"
    shutil.copytree(model_dir, math23k)
    saved = json.loads((math23k / "run_config.json").read_text())
    saved["config"]["data.dataset"] = "math23k"
    (math23k / "run_config.json").write_text(json.dumps(saved))
    assert solve_text(math23k, "840/6/70+630=？").numbers == ["840", "6", "70", "630"]
    assert solve_text(model_dir, "840/6/70+630=？").numbers == ["840", "6/70", "630"]


def test_a_typeset_minus_and_full_width_digits_read_as_ascii():
    assert tokenize("It was −5 degrees and then 12 more.", "en")[2] == "-5"  # U+2212, not a silent 5
    assert tokenize("小明有１２个苹果，用了３个", "zh")[2:4] == ["有", "12"] and "3" in tokenize("用了３个", "zh")


def test_a_file_of_odd_lines_answers_every_line_naming_file_and_line(model_dir, tmp_path, capsys):
    """A line nested too deep, an integer of 5,000 digits, digit-like signs, raw U+2028 inside a
    string, a null id or a repeated one: each line gets its entry, the others are solved."""
    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join([
        json.dumps({"id": "a", "text": EN}),
        '{"id": "deep", "text": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"id": ' + "9" * 5000 + ', "text": "Tom has 3 apples and 4 pears."}',
        json.dumps({"id": "signs", "text": "Tom has ፩ apple, ⓷ pears and 4 plums and 5 figs."}, ensure_ascii=False),
        json.dumps({"id": "ls", "text": "Tom has 3\u2028apples and\u2029 4 pears\u0085."}, ensure_ascii=False),
        json.dumps({"id": None, "text": EN}),
        json.dumps({"id": "a", "text": "Tom has 3 apples and 4 pears."}),
    ]) + "\n", encoding="utf-8")
    out = tmp_path / "answers.jsonl"
    assert main(["--model", str(model_dir), "--file", str(problems), "--out", str(out)]) == 0
    answers = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n") if line]
    assert [a["id"] for a in answers] == ["a", "2", "3", "signs", "ls", "6", "a#2"]
    assert answers[1]["error"] == f"{problems}:2: not JSON (nested deeper than the JSON reader goes)"
    assert answers[2]["error"] == f"{problems}:3: not JSON (an integer of more than 4,300 digits)"
    assert answers[5]["error"].startswith(f"{problems}:6: \"id\" is null")
    assert all("equation" in answers[i] for i in (0, 3, 4, 6))
    assert answers[3]["not_read"] == ["፩", "⓷"]
    assert f"[solve] note: {problems}:7: id 'a' repeats an earlier line's: answered as 'a#2'" in capsys.readouterr().out


def test_two_writers_of_one_answers_file_never_share_a_temporary_file(model_dir, tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"text": EN}) + "\n", encoding="utf-8")
    other = tmp_path / "answers.jsonl.partial"  # another command's file in progress, under the old shared name
    other.write_text("another writer's half-written answers\n", encoding="utf-8")
    assert main(["--model", str(model_dir), "--file", str(problems), "--out", str(tmp_path / "answers.jsonl")]) == 0
    assert other.read_text(encoding="utf-8") == "another writer's half-written answers\n"
    assert json.loads((tmp_path / "answers.jsonl").read_text(encoding="utf-8"))["id"] == "1"


def test_a_records_segmented_text_gives_its_tokens_as_training_reads_them(tmp_path):
    # jieba's words are not always the files' segmentation: a benchmark record is read by its own.
    from hlgt.data.srl import make_annotator
    from hlgt.solve import prepare_requests

    segmented = "第 二 天 一个 人 看 了 24 页 ， 还 剩 多少 页 ？"
    record = {"id": "m", "original_text": segmented.replace(" ", ""), "segmented_text": segmented}
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in (
        record, {"id": "r", "text": ZH}, {"text": ZH, "segmented_text": 3})) + "\n", encoding="utf-8")
    requests = list(read_requests(path))
    results, rows = prepare_requests(requests, make_annotator("offline"), "zh")
    assert rows[0]["tokens"] == segmented.split() and rows[1]["tokens"] == tokenize(ZH, "zh")
    assert results[2]["error"].endswith(':3: "segmented_text" is not a string')


def test_words_the_model_never_learned_are_named(model_dir, tmp_path, capsys):
    text = "Zorblax quuxes 3 flibbers and 4 wibbles ."
    s = solve_text(model_dir, text, lang="en")
    assert {"Zorblax", "quuxes", "flibbers", "wibbles"} <= set(s.unknown) and "3" not in s.unknown
    assert main(["--model", str(model_dir), text]) == 0
    out = capsys.readouterr().out
    assert "unknown:  Zorblax, quuxes" in out and "note:     most of the text's words are unknown to the model" in out
    problems, answers = tmp_path / "p.jsonl", tmp_path / "a.jsonl"
    problems.write_text(json.dumps({"id": "z", "text": text}) + "\n")
    assert main(["--model", str(model_dir), "--file", str(problems), "--out", str(answers)]) == 0
    assert json.loads(answers.read_text())["unknown_words"] == s.unknown


def test_an_annotator_failing_on_one_text_is_a_user_error(model_dir, monkeypatch):
    import hlgt.solve
    from hlgt.data.srl import AnnotationError

    class Failing:
        def annotate(self, tokens, lang):
            raise AnnotationError("LTP failed on this problem")

    monkeypatch.setattr(hlgt.solve, "make_annotator", lambda name, model="": Failing())
    with pytest.raises(ValueError, match="the annotator failed on this text: LTP failed on this problem"):
        main(["--model", str(model_dir), EN])


def test_an_id_that_is_no_string_or_integer_is_named(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": 1.5, "text": EN}) + "\n")
    assert next(read_requests(path)).error.endswith('"id" is 1.5: give a string or an integer, or no id')

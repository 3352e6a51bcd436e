"""Reading problem files: three layouts, ids always strings, every bad record a counted skip."""
import json

import pytest

from hlgt.data.problems import DataFileError, Problem, Unreadable, _records, guess_lang, read_problems

RECORDS = [
    {"id": "1", "original_text": "小明有3个苹果", "segmented_text": "小明 有 3 个 苹果",
     "equation": "x=3", "ans": "3"},
    {"id": "2", "original_text": "Tom has 5 pens .", "segmented_text": "Tom has 5 pens .",
     "equation": "x=5", "ans": "5"},
]


def _raw_records(path):
    """Every readable record of a benchmark file as its parsed JSON value, in order."""
    return [value for _, value in _records(path) if not isinstance(value, Unreadable)]


def _seven_line(records):
    """Math23K's layout: pretty-printed objects written one after another."""
    return "\n".join(json.dumps(r, ensure_ascii=False, indent=4) for r in records) + "\n"


def test_reads_math23k_seven_line_layout(tmp_path):
    path = tmp_path / "math23k" / "Math_23K_train.json"
    path.parent.mkdir()
    path.write_text(_seven_line(RECORDS), encoding="utf-8")
    result = read_problems(path)
    assert result.problems[0] == Problem(
        id="1", lang="zh", tokens=("小明", "有", "3", "个", "苹果"), equation="x=3", answer="3",
        source="math23k/Math_23K_train.json",
    )
    assert result.records == 2 and not result.skipped


def test_language_is_guessed_per_file(tmp_path):
    """A pure-arithmetic Math23K problem ("23 * 42 = ．") is Chinese data like the rest of its file."""
    arithmetic = {"id": "51", "segmented_text": "23 * 42 = ．", "equation": "x=23*42", "ans": "966"}
    zh = tmp_path / "zh.json"
    zh.write_text(_seven_line([RECORDS[0], arithmetic]), encoding="utf-8")
    assert [p.lang for p in read_problems(zh).problems] == ["zh", "zh"]
    en = tmp_path / "en.json"
    en.write_text(json.dumps([RECORDS[1], arithmetic]), encoding="utf-8")
    assert [p.lang for p in read_problems(en).problems] == ["en", "en"]
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps([RECORDS[0], arithmetic]), encoding="utf-8")
    assert [p.lang for p in read_problems(mixed, lang="zh").problems] == ["zh", "zh"]


def test_a_file_in_the_other_language_is_refused(tmp_path):
    """MAWPS saved under Math23K's name: stop, naming the file, instead of training on it."""
    wrong = tmp_path / "Math_23K_val.json"
    wrong.write_text(json.dumps([RECORDS[1]] * 3 + [RECORDS[0]]), encoding="utf-8")
    with pytest.raises(DataFileError, match=r"Math_23K_val.json: expected Chinese problems, but 3 of 4"):
        read_problems(wrong, lang="zh")


def test_reads_json_array_with_int_ids_and_float_answers(tmp_path):
    """MAWPS writes ids as ints and answers as floats: both come back as strings."""
    path = tmp_path / "MAWPS.json"
    path.write_text(json.dumps([{**RECORDS[1], "id": 7, "ans": 504.0}]), encoding="utf-8")
    (p,) = read_problems(path, lang="en").problems
    assert p.id == "7" and isinstance(p.id, str)
    assert p.answer == "504.0"


def test_reads_json_lines_and_counts_malformed_line(tmp_path):
    path = tmp_path / "valid.ape.json"
    broken = '{"id": "9", "segmented_text": "broken'
    lines = [json.dumps(RECORDS[0], ensure_ascii=False), broken, json.dumps(RECORDS[1])]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = read_problems(path)
    assert [p.id for p in result.problems] == ["1", "2"]
    assert result.skipped == {"malformed_json": 1}
    assert result.records == 3


def test_seven_line_layout_resumes_after_a_malformed_object(tmp_path):
    path = tmp_path / "f.json"
    text = _seven_line(RECORDS[:1]) + '{\n    "id":"x",\n    "ans": \n}\n' + _seven_line(RECORDS[1:])
    path.write_text(text, encoding="utf-8")
    result = read_problems(path)
    assert [p.id for p in result.problems] == ["1", "2"]
    assert result.skipped == {"malformed_json": 1}


def _more(n):
    return [{**RECORDS[1], "id": str(i)} for i in range(10, 10 + n)]


@pytest.mark.parametrize("layout", ["seven-line", "concatenated", "array"])
def test_a_record_that_is_not_utf8_costs_itself_not_the_file(tmp_path, layout):
    good = [json.dumps(r, indent=4 if layout == "seven-line" else None).encode() for r in _more(3)]
    bad = json.dumps({**RECORDS[1], "id": "bad", "segmented_text": "caf@ 3"}).encode().replace(b"@", b"\xe9")
    sep = b",\n" if layout == "array" else b"\n" if layout == "seven-line" else b""
    body = sep.join([good[0], bad, *good[1:]])
    path = tmp_path / "f.json"
    path.write_bytes(b"[" + body + b"]" if layout == "array" else body)
    result = read_problems(path)
    assert [p.id for p in result.problems] == ["10", "11", "12"] and result.skipped == {"malformed_json": 1}
    assert "not UTF-8 text: byte 0xe9" in result.notes[0]


def test_objects_written_on_one_line_resume_after_a_malformed_one(tmp_path):
    objects = [json.dumps(r) for r in _more(5)]
    objects[2] = objects[2].replace('"equation":', '"equation"', 1)  # broken, the next object on its line
    path = tmp_path / "f.json"
    path.write_text("".join(objects) + "\n", encoding="utf-8")
    result = read_problems(path)
    assert [p.id for p in result.problems] == ["10", "11", "13", "14"] and result.skipped == {"malformed_json": 1}


def test_the_layout_is_read_from_two_records_not_the_first_line_alone(tmp_path):
    # A one-line first object before seven-line ones; JSON Lines with a broken first line.
    path = tmp_path / "f.json"
    path.write_text(json.dumps(_more(1)[0]) + "\n" + _seven_line(_more(4)[1:]), encoding="utf-8")
    result = read_problems(path)
    assert result.records == 4 and len(result.problems) == 4 and not result.skipped
    lines = [json.dumps(r) for r in _more(4)]
    path.write_text("{broken\n" + "\n".join(lines[:2]) + ' xyz\n' + "\n".join(lines[2:]) + "\n", encoding="utf-8")
    result = read_problems(path)
    assert result.records == 5 and [p.id for p in result.problems] == ["10", "12", "13"]
    assert result.skipped == {"malformed_json": 2}  # a line each
    path.write_text("[\n" + ",\n".join(lines[:2]) + "\n]\n", encoding="utf-8")  # an array, an item a line
    result = read_problems(path)
    assert [p.id for p in result.problems] == ["10", "11"] and not result.skipped


def test_a_segmented_text_is_read_in_the_forms_a_raw_text_is(tmp_path):
    # Full-width digits are ASCII ones, invisible characters go: as tokenize reads a raw text.
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(json.dumps({"id": i, "segmented_text": t, "equation": "x=8-3", "ans": "5"})
                              for i, t in enumerate(["Jack had ８ pens and gave ３ away .", "1\u200b2 \u2060pens",
                                                     "\u200b \u200e"])) + "\n", encoding="utf-8")
    result = read_problems(path)
    assert [p.tokens for p in result.problems] == [("Jack", "had", "8", "pens", "and", "gave", "3", "away", "."),
                                                   ("12", "pens")]
    assert result.skipped == {"empty_text": 1}


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"id": "3", "segmented_text": "a 1"}, "missing_field"),  # neither equation nor answer
        ({"id": "3", "segmented_text": "a 1", "equation": None, "ans": None}, "missing_field"),
        ({"segmented_text": "a 1", "equation": "x=1", "ans": "1"}, "missing_field"),
        ({"id": "3", "segmented_text": "a 1", "equation": "x=1", "ans": [1]}, "bad_field_type"),
        ({"id": "3", "segmented_text": "a 1", "equation": 5, "ans": "1"}, "bad_field_type"),
        ({"id": True, "segmented_text": "a 1", "equation": "x=1", "ans": "1"}, "bad_field_type"),
        ({"id": "3", "segmented_text": "   ", "equation": "x=1", "ans": "1"}, "empty_text"),
        ([1, 2], "not_an_object"),
    ],
)
def test_bad_records_are_counted_skips(tmp_path, record, reason):
    path = tmp_path / "f.json"
    path.write_text(json.dumps([RECORDS[1], record]), encoding="utf-8")
    result = read_problems(path)
    assert len(result.problems) == 1
    assert result.skipped == {reason: 1}


def test_non_numeric_answer_is_read_and_left_to_cleaning(tmp_path):
    """The reader keeps the raw answer; clean.py counts it as unreadable_answer."""
    path = tmp_path / "f.json"
    path.write_text(json.dumps([{**RECORDS[1], "ans": "many"}]), encoding="utf-8")
    assert read_problems(path).problems[0].answer == "many"


def test_ten_thousand_character_text_is_read(tmp_path):
    path = tmp_path / "f.json"
    text = " ".join(["word"] * 2000)  # ~10,000 characters
    path.write_text(json.dumps([{**RECORDS[1], "segmented_text": text}]), encoding="utf-8")
    (p,) = read_problems(path).problems
    assert len(p.tokens) == 2000


def test_the_generic_format_is_tokenised_as_solve_does(tmp_path):
    # JSON Lines of id, original_text and equation and/or ans (SVAMP, ASDiv-A or your own files).
    path = tmp_path / "f.jsonl"
    records = [{"id": 1, "original_text": "小明买了3.5千克苹果，吃了一半", "equation": "x=3.5/2"},
               {"id": 2, "original_text": "商店有三个箱子，共12个球", "ans": "4"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    first, second = read_problems(path).problems
    assert "3.5" in first.tokens and "千克" in first.tokens and "一半" in first.tokens and first.lang == "zh"
    assert (first.equation, first.answer) == ("x=3.5/2", "") and (second.equation, second.answer) == ("", "4")
    english = tmp_path / "e.json"
    english.write_text(json.dumps([{"id": "a", "original_text": "Tom has 5 pens. He buys 3.", "ans": 8}]))
    (p,) = read_problems(english).problems
    assert p.tokens == ("Tom", "has", "5", "pens", ".", "He", "buys", "3", ".") and p.lang == "en"



def test_a_raw_text_is_tokenised_in_its_files_language(tmp_path):
    # Pure arithmetic in a Chinese file is Chinese: a/b is a division there, a fraction in English.
    path = tmp_path / "f.jsonl"
    records = [{"id": 1, "original_text": "小明有3个苹果", "ans": "3"},
               {"id": 2, "original_text": "840/6/70+630=．", "ans": "632"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert read_problems(path).problems[1].tokens == ("840", "/", "6", "/", "70", "+", "630", "=", "．")
    assert read_problems(path, lang="en").problems[1].tokens == ("840", "/", "6/70", "+", "630", "=", "．")

def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(DataFileError, match="not found.*nope.json"):
        read_problems(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": 1,', encoding="utf-8")
    with pytest.raises(DataFileError, match="bad.json"):
        read_problems(bad)
    with pytest.raises(ValueError, match="lang"):
        read_problems(bad, lang="fr")


def test_a_file_without_problems_is_an_error_naming_it(tmp_path):
    path = tmp_path / "f.json"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataFileError, match=r"f.json holds no readable problem$"):
        read_problems(path)
    path.write_text(json.dumps([{"id": "1"}]), encoding="utf-8")
    with pytest.raises(DataFileError, match=r"f.json holds no readable problem \(skipped: \{'missing_field': 1\}\)"):
        read_problems(path)


def test_guess_lang():
    assert guess_lang("小明 有 3 个") == "zh"
    assert guess_lang("Tom has 3") == "en"


@pytest.mark.realdata
@pytest.mark.parametrize(
    "name, count, lang",
    [
        ("math23k/Math_23K_train.json", 21162, "zh"),
        ("math23k/Math_23K_val.json", 1000, "zh"),
        ("math23k/Math_23K_test.json", 1000, "zh"),
        ("mawps/MAWPS.json", 2373, "en"),
        ("ape210k/valid.ape.json", 5000, "zh"),
    ],
)
def test_real_files_read_whole(name, count, lang, real_data):
    result = read_problems(real_data / name)
    assert len(result.problems) == count and not result.skipped
    assert all(isinstance(p.id, str) and p.lang == lang for p in result.problems)
    assert len({p.id for p in result.problems}) == count


@pytest.mark.realdata
@pytest.mark.slow
@pytest.mark.parametrize("path, differing", [("math23k/Math_23K.json", 13), ("mawps/MAWPS.json", 0)])
def test_raw_texts_give_the_quantities_of_their_files_segmentation(real_data, tmp_path, path, differing):
    # The benchmark files give each problem's original text beside its segmentation: read as a
    # generic file (original_text only, tokenised as solve does), the texts should give the same
    # quantities. The 13 Math23K exceptions are odd texts (六1班, 第十3天, Kg4.5, +6).
    from hlgt.data.numbers import extract_quantities
    segmented = read_problems(real_data / path).problems
    records = _raw_records(real_data / path)
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps({k: r[k] for k in ("id", "original_text", "equation", "ans")}, ensure_ascii=False)
                           + "\n" for r in records), encoding="utf-8")
    read_raw = read_problems(raw).problems
    assert [p.id for p in read_raw] == [p.id for p in segmented]

    def quantities(problem):
        return [q.text for q in extract_quantities(problem.tokens)[1]]

    assert sum(quantities(a) != quantities(b) for a, b in zip(segmented, read_raw)) == differing


@pytest.mark.realdata
def test_most_raw_math23k_texts_are_segmented_as_their_file_writes_them(real_data, tmp_path):
    # jieba without its HMM: 726 of the 1,000 test texts give the file's tokens exactly (327 with it).
    path = real_data / "math23k" / "Math_23K_test.json"
    records = _raw_records(path)
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps({k: r[k] for k in ("id", "original_text", "ans")}, ensure_ascii=False) + "\n"
                           for r in records), encoding="utf-8")
    same = sum(a.tokens == b.tokens for a, b in zip(read_problems(path).problems, read_problems(raw).problems))
    assert same >= 700


DEEP = '{"id": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
LONG_INT = '{"id": "int", "segmented_text": "a 3", "equation": "x=3", "ans": ' + "9" * 5000 + "}"


@pytest.mark.parametrize("layout", ["jsonl", "array", "math23k"])
def test_one_odd_record_is_one_counted_skip_named_by_file_and_line(tmp_path, layout):
    """A record nested too deep for Python's reader, or with a 5,000-digit integer, is one skip
    with its reason; the records around it are read."""
    good = [json.dumps(RECORDS[1]), json.dumps({**RECORDS[1], "id": "3"})]
    if layout == "jsonl":
        text = "\n".join([good[0], DEEP, LONG_INT, good[1]]) + "\n"
    elif layout == "array":
        text = "[\n" + ",\n".join([good[0], DEEP, LONG_INT, good[1]]) + "\n]\n"
    else:  # each record's 7 lines
        text = _seven_line(RECORDS[1:]) + f"{DEEP}\n{LONG_INT}\n" + _seven_line([{**RECORDS[1], "id": "3"}])
    path = tmp_path / "f.json"
    path.write_text(text, encoding="utf-8")
    result = read_problems(path)
    assert [p.id for p in result.problems] == ["2", "3"]
    assert result.skipped == {"nested_too_deep": 1, "number_too_long": 1} and result.records == 4
    line = {"jsonl": 2, "array": 3, "math23k": 8}[layout]
    assert result.notes == [f"{path}:{line}: nested_too_deep (nested deeper than the JSON reader goes)",
                            f"{path}:{line + 1}: number_too_long (an integer of more than 4,300 digits)"]


def test_json_lines_are_split_on_newlines_only(tmp_path):
    """U+2028, U+2029 and U+0085 inside a JSON string are characters of the text, not line breaks."""
    record = {**RECORDS[1], "segmented_text": "Tom\u2028has 5\u2029pens\u0085."}
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps(RECORDS[0], ensure_ascii=False) + "\n" + json.dumps(record, ensure_ascii=False)
                    + "\n" + '{"id": "9", "segmented_text": "broken\n', encoding="utf-8")
    result = read_problems(path)
    assert ([p.id for p in result.problems] == ["1", "2"]
            and result.problems[1].tokens == ("Tom", "has", "5", "pens", "."))
    assert result.skipped == {"malformed_json": 1}
    assert result.notes[0].startswith(f"{path}:3: malformed_json (Unterminated string")


def test_a_null_answer_with_an_equation_is_scored_by_the_equation(tmp_path):
    from hlgt.data.numbers import to_example

    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps({"id": "n", "original_text": "Tom has 5 pens and buys 3 .", "equation": "x=5+3",
                                "ans": None}) + "\n", encoding="utf-8")
    (problem,) = read_problems(path).problems
    assert problem.answer == "" and to_example(problem).answer == 8


def test_a_repeated_id_is_made_unique_with_a_note(tmp_path):
    path = tmp_path / "f.jsonl"
    records = [{**RECORDS[1], "id": "a"}, {**RECORDS[1], "id": "a"}, {**RECORDS[1], "id": "a#2"},
               {**RECORDS[1], "id": "a"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = read_problems(path)
    assert [p.id for p in result.problems] == ["a", "a#2", "a#2#2", "a#3"]
    assert result.notes[0] == f"{path}:2: id 'a' repeats an earlier record's: read as 'a#2'"

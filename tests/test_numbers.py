"""Number extraction and equation → prefix: tricky texts, slot matching, flags, exact checks."""
from fractions import Fraction

import pytest

from hlgt.data.clean import clean_split
from hlgt.data.numbers import (
    NUM_KINDS,
    ExampleError,
    answer_matches,
    canonical_constant,
    extract_quantities,
    to_example,
)
from hlgt.data.problems import Problem, read_problems
from hlgt.data.splits import FILES, LANGS, load_split
from hlgt.expr import eval_prefix, values_match


def _q(text: str):
    tokens, quantities = extract_quantities(text.split())
    return tokens, [(q.text, q.kind, q.value, q.position) for q in quantities]


def _problem(text: str, equation: str, answer: str = "0", lang: str = "zh") -> Problem:
    return Problem(id="t", lang=lang, tokens=tuple(text.split()), equation=equation, answer=answer, source="t/t.json")


@pytest.mark.parametrize(
    "text, tokens, quantities",
    [
        # mixed numbers, glued or spread over APE210K's one-character tokens
        ("运 来 1(5/6) 吨", ["运", "来", "1(5/6)", "吨"], [("1(5/6)", "fraction", 11 / 6, 2)]),
        ("有 12 ( 7 / 8 ) 米", ["有", "12(7/8)", "米"], [("12(7/8)", "fraction", 12.875, 1)]),
        ("的 ( 1 / 5 ) ，", ["的", "(1/5)", "，"], [("(1/5)", "fraction", 0.2, 1)]),
        # percentages and decimals
        ("降价 20% 后", ["降价", "20%", "后"], [("20%", "percentage", 0.2, 1)]),
        ("利率 3.33% 和 0.5", ["利率", "3.33%", "和", "0.5"],
         [("3.33%", "percentage", 0.0333, 1), ("0.5", "decimal", 0.5, 3)]),
        # ratios: one token, spread with a full-width colon, three parts
        ("比 是 3:7 。", ["比", "是", "3", ":", "7", "。"], [("3", "ratio", 3.0, 2), ("7", "ratio", 7.0, 4)]),
        ("按 3 ： 4 ： 5 分", ["按", "3", "：", "4", "：", "5", "分"],
         [("3", "ratio", 3.0, 1), ("4", "ratio", 4.0, 3), ("5", "ratio", 5.0, 5)]),
        ("比 是 1：20", ["比", "是", "1", "：", "20"], [("1", "ratio", 1.0, 2), ("20", "ratio", 20.0, 4)]),
        # numbers inside units: the unit token follows the number
        ("重 5千克 ，", ["重", "5", "千克", "，"], [("5", "integer", 5.0, 1)]),
        ("长 145cm", ["长", "145", "cm"], [("145", "integer", 145.0, 1)]),
        ("速度 15千米/小时", ["速度", "15", "千米/小时"], [("15", "integer", 15.0, 1)]),
        ("用 (3/4)kg 面", ["用", "(3/4)", "kg", "面"], [("(3/4)", "fraction", 0.75, 1)]),
        ("is 60kph .", ["is", "60", "kph", "."], [("60", "integer", 60.0, 1)]),
        ("a 30-mile trip", ["a", "30", "mile", "trip"], [("30", "integer", 30.0, 1)]),
        ("面积 0.09m2", ["面积", "0.09", "m2"], [("0.09", "decimal", 0.09, 1)]),
        # thousands separators, bare fractions, signs
        ("has 1,250 stamps", ["has", "1,250", "stamps"], [("1,250", "integer", 1250.0, 1)]),
        ("sells 3/4 of", ["sells", "3/4", "of"], [("3/4", "fraction", 0.75, 1)]),
        ("-7 times", ["-7", "times"], [("-7", "integer", -7.0, 0)]),
        # between two numbers in one token a minus is an operator, not the second one's sign
        ("差 是 3-5千克", ["差", "是", "3", "-", "5", "千克"], [("3", "integer", 3.0, 2), ("5", "integer", 5.0, 4)]),
        # a separate % token stays the number's unit word (MAWPS writes 5*0.01)
        ("a 5 % rise", ["a", "5", "%", "rise"], [("5", "integer", 5.0, 1)]),
        # not quantities: Chinese numerals, ordinals, digits inside a word, absurd digit runs
        ("第二 天 一半 两 个", ["第二", "天", "一半", "两", "个"], []),
        ("the 1st and 8th MP3 第3", ["the", "1st", "and", "8th", "MP3", "第3"], []),
        ("9" * 40, ["9" * 40], []),
    ],
)
def test_extract_quantities(text, tokens, quantities):
    got_tokens, got = _q(text)
    assert got_tokens == tokens
    assert [(t, k, p) for t, k, _, p in got] == [(t, k, p) for t, k, _, p in quantities]
    assert [v for _, _, v, _ in got] == pytest.approx([v for _, _, v, _ in quantities])


def test_quantity_positions_point_at_their_tokens():
    tokens, quantities = extract_quantities("买 5千克 苹果 ， 用去 (1/4) ， 比 是 2 ： 3 ， 20%".split())
    assert [tokens[q.position] for q in quantities] == [q.text for q in quantities]
    assert {q.kind for q in quantities} <= set(NUM_KINDS)


def test_long_text_without_spaces_does_not_crash():
    tokens, quantities = extract_quantities(["1," * 5000])
    assert len(quantities) == 5000 and tokens[0] == "1"


@pytest.mark.parametrize(
    "text, equation, answer, prefix",
    [
        ("运 了 (5/6) ， 共 48 吨", "x=48*(5/6)", "40", ["*", "N1", "N0"]),  # "/ 5 6" becomes the text's (5/6)
        ("运 来 1(5/6) 吨 ， 卖 了 (1/3)", "x=1(5/6)*(1-(1/3))", "((11)/(9))", ["*", "N0", "-", "1", "N1"]),
        ("There are 3 boxes of 4.0 pens", "X=(3.0*4.0)", "12.0", ["*", "N0", "N1"]),  # 3.0 matches 3 by value
        ("降价 20% ， 原价 200 元", "x=200*(1-0.2)", "160", ["*", "N1", "-", "1", "N0"]),  # 0.2 matches 20%
        ("has 1,250 stamps and gives 375", "x=1250-375", "875", ["-", "N0", "N1"]),
        ("5 个 和 5 个", "x=5+5", "10", ["+", "N0", "N0"]),  # the first of equal quantities
        ("半径 5 米", "x=3.14*5*5", "78.5", ["*", "*", "3.14", "N0", "N0"]),
        ("比 是 3:7 ， 和 是 150", "x=150*3/(3+7)", "45", ["/", "*", "N2", "N0", "+", "N0", "N1"]),
        ("利率 20% 的 100", "x=100*(20)%", "20", ["*", "N1", "N0"]),  # APE210K's (20)% is the text's 20%
        ("between -11 and 7", "x=(-11.0-7.0)/2", "-9", ["/", "-", "N0", "N1", "2"]),
        ("miles 4 in 30 for 48", "miles=4.0/30.0*48.0", "6.4", ["*", "/", "N0", "N1", "N2"]),
    ],
)
def test_equation_to_prefix(text, equation, answer, prefix):
    ex = to_example(_problem(text, equation, answer))
    assert ex.flag is None and ex.prefix == prefix
    assert values_match(eval_prefix(ex.prefix, [q.value for q in ex.quantities]), ex.answer)


@pytest.mark.parametrize(
    "answer, value",
    [("((3)/(4))", 0.75), ("7((2)/(3))", 23 / 3), ("20%", 0.2), ("160/(1-20%)", 200.0), ("1(1/2)", 1.5),
     ("504.0", 504.0), ("-6", -6.0)],
)
def test_answer_forms(answer, value):
    ex = to_example(_problem("有 1 个", f"x={value!r}", answer))
    assert ex.answer == pytest.approx(value)


@pytest.mark.parametrize(
    "equation, answer, flag",
    [
        ("X-9=4", "13", "unparseable_equation"),  # not solved for x
        ("x=80千米/小时", "80", "unparseable_equation"),
        ("x=5/(3-3)", "1", "unparseable_equation"),  # division by zero
        ("x=3+3", "7", "value_mismatch"),
    ],
)
def test_unusable_equations_are_flagged(equation, answer, flag):
    ex = to_example(_problem("有 3 个", equation, answer))
    assert ex.prefix is None and ex.flag == flag


@pytest.mark.parametrize("answer", ["many", "1/0", "x"])
def test_unreadable_answer_raises_with_reason(answer):
    with pytest.raises(ExampleError) as info:
        to_example(_problem("有 3 个", "x=3", answer))
    assert info.value.reason == "unreadable_answer"


def test_answer_rounded_to_its_written_decimals_matches():
    assert answer_matches(2.99 / 12, 0.25, "0.25")  # MAWPS rounds to 2 decimals
    assert answer_matches(72.0088, 72.0, "72.0")
    assert not answer_matches(40 / 7, 5.0, "5.0")
    assert not answer_matches(20.4, 20.0, "20")  # an integer answer is exact (values_match only)
    assert answer_matches(2 / 3, 0.6667, "0.6667")


@pytest.mark.parametrize(
    "value, text",
    [(Fraction(1), "1"), (Fraction(1, 2), "0.5"), (Fraction(314, 100), "3.14"), (Fraction(-2), "-2"),
     (Fraction(1, 3), "(1/3)"), (Fraction(1, 100), "0.01"), (Fraction(100), "100")],
)
def test_canonical_constant(value, text):
    assert canonical_constant(value) == text


def test_constants_are_canonical():
    """1.0 and 1, 50% and 0.5 are one constant each."""
    a = to_example(_problem("有 3 个", "x=3*(1.0-50%)", "1.5"))
    b = to_example(_problem("有 3 个", "x=3*(1-0.5)", "1.5"))
    assert a.prefix == b.prefix == ["*", "N0", "-", "1", "0.5"]


def _check_prefixes(problems):
    """Every kept problem's prefix evaluates to its answer, with the float quantity values that
    the shards store (the exact check happened in to_example)."""
    result = clean_split(problems, train=True, min_const_freq=1)
    by_id = {p.id: p for p in problems}
    for ex in result.examples:
        value = eval_prefix(ex.prefix, [q.value for q in ex.quantities])
        assert answer_matches(value, ex.answer, by_id[ex.id].answer), (ex.id, ex.prefix, value, ex.answer)
    return result


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_every_sample_prefix_evaluates_to_its_answer(split):
    problems = load_split("sample", split)
    result = _check_prefixes(problems)
    assert len(result.examples) == len(problems)


@pytest.mark.realdata
@pytest.mark.parametrize("dataset, split", [("math23k", "train"), ("math23k", "valid"), ("math23k", "test"),
                                            ("mawps", "train"), ("ape210k", "valid")])
def test_every_real_prefix_evaluates_to_its_answer(dataset, split, real_data):
    path = real_data / FILES[dataset][split]
    result = _check_prefixes(read_problems(path, lang=LANGS[dataset]).problems)
    assert len(result.examples) > 0.97 * result.read


def test_a_problem_with_an_equation_only_or_an_answer_only():
    # The generic format: the answer is the equation's value; without an equation, the answer
    # alone (no gold equation: scored by value).
    from hlgt.data.problems import Problem

    only_eq = to_example(Problem(id="e", lang="en", tokens=("5", "and", "3"), equation="x=5+3", answer="", source="t"))
    assert only_eq.prefix == ["+", "N0", "N1"] and only_eq.answer == 8.0 and only_eq.flag is None
    only_ans = to_example(Problem(id="a", lang="en", tokens=("5", "and", "3"), equation="", answer="8", source="t"))
    assert only_ans.prefix is None and only_ans.answer == 8.0 and only_ans.flag == "no_equation"
    with pytest.raises(ExampleError, match="no answer, and its equation"):
        to_example(Problem(id="b", lang="en", tokens=("5",), equation="x=5/0", answer="", source="t"))

"""Cleaning (named drop reasons, constants learned on train) and splits (files, MAWPS folds, sample)."""
import json
from collections import Counter

import pytest

from hlgt.data import splits
from hlgt.data.clean import clean_split, learn_constants, over_limits
from hlgt.data.numbers import to_example
from hlgt.data.problems import Problem
from hlgt.data.splits import (
    MAWPS_FOLD_FILES,
    SAMPLE_DIR,
    load_split,
    make_mawps_folds,
    mawps_fold_ids,
    read_split,
)


def load_clean(dataset, data_dir=None, fold=0):
    """Every split cleaned as the build cleans them: constants learned on train, applied to the others."""
    train = clean_split(load_split(dataset, "train", data_dir, fold), train=True)
    return {"train": train, **{split: clean_split(load_split(dataset, split, data_dir, fold), train=False,
                                                  constants=train.constants) for split in ("valid", "test")}}


def _p(pid, text, equation, answer):
    return Problem(id=pid, lang="zh", tokens=tuple(text.split()), equation=equation, answer=answer, source="t/t.json")


def _common(n):
    """n problems using constant "1"."""
    return [_p(f"c{i}", f"用去 (1/{i + 2}) 剩 {i + 10} 米", f"x={i + 10}/(1-(1/{i + 2}))",
               str((i + 10) / (1 - 1 / (i + 2)))) for i in range(n)]


BAD = [
    _p("b1", "有 3 个", "X-9=4", "13"),  # unparseable_equation
    _p("b2", "有 3 个", "x=3+3", "7"),  # value_mismatch
    _p("b3", "有 3 个", "x=3", "many"),  # unreadable_answer
    _p("b4", "半径 5 米", "x=3.14*5*5", "78.5"),  # rare_constant (3.14 seen once)
    _p("b5", " ".join(["字"] * 600) + " 3", "x=3", "3"),  # too_long
]


def test_train_drops_are_counted_by_reason():
    result = clean_split(_common(6) + BAD, train=True, min_const_freq=5)
    assert result.dropped == Counter(unparseable_equation=1, value_mismatch=1, unreadable_answer=1,
                                     rare_constant=1, too_long=1)
    assert [ex.id for ex in result.examples] == [f"c{i}" for i in range(6)]
    assert result.read == len(result.examples) + sum(result.dropped.values())
    assert result.constants == ["1"]
    assert all(ex.flag is None and ex.prefix is not None for ex in result.examples)


def test_valid_and_test_keep_every_readable_answer():
    train = clean_split(_common(6), train=True, min_const_freq=5)
    test = clean_split(BAD, train=False, constants=train.constants)
    assert test.dropped == Counter(unreadable_answer=1, too_long=1)
    assert [ex.id for ex in test.examples] == ["b1", "b2", "b4"]
    assert test.unrepresentable == Counter(unparseable_equation=1, value_mismatch=1, rare_constant=1)
    flags = {ex.id: ex.flag for ex in test.examples}
    assert flags == {"b1": "unparseable_equation", "b2": "value_mismatch", "b4": "rare_constant"}
    assert all((ex.prefix is None) == (ex.flag is not None) for ex in test.examples)
    assert {ex.id: ex.answer for ex in test.examples}["b4"] == 78.5  # scored by value


def test_problems_over_the_limits_are_counted_skips_in_every_split():
    long_text = " ".join(["apple"] * 1666) + " 3"  # ~10,000 characters
    problem = Problem(id="L", lang="en", tokens=tuple(long_text.split()), equation="x=3", answer="3", source="t")
    many = Problem(id="Q", lang="en", tokens=tuple(" ".join(f"{i} apples ," for i in range(1, 32)).split()),
                   equation="x=1+2", answer="3", source="t")  # 31 quantities, 93 tokens
    for train in (True, False):
        result = clean_split([problem, many], train=train, constants=None if train else [])
        assert result.dropped == Counter(too_long=1, too_many_quantities=1) and result.examples == []
    assert over_limits(many.tokens, range(31)) == ("too_many_quantities",
                                                   "the problem has 31 quantities; the model reads at most 30")
    assert over_limits(many.tokens, range(30)) is None


def test_constants_learned_by_frequency_then_value():
    examples = [to_example(_p(f"k{i}", "有 7 个", eq, str(ans)))
                for i, (eq, ans) in enumerate([("x=7*100", 700)] * 3 + [("x=7+1", 8)] * 3 + [("x=7*2", 14)] * 2
                                               + [("x=7*3.14", 21.98)] * 3)]
    assert learn_constants(examples, 3) == ["1", "3.14", "100"]
    assert learn_constants(examples, 1) == ["1", "3.14", "100", "2"]


def test_given_constants_are_used_as_is():
    result = clean_split(_common(2) + BAD[3:4], train=True, constants=["1", "3.14"])
    assert result.constants == ["1", "3.14"] and not result.dropped


def test_clean_split_argument_errors():
    with pytest.raises(ValueError, match="constants"):
        clean_split([], train=False)
    with pytest.raises(ValueError, match="min_const_freq"):
        clean_split([], train=True, min_const_freq=0)


# --- splits -----------------------------------------------------------------------------------


def test_split_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'm23k'"):
        load_split("m23k", "train", tmp_path)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load_split("math23k", "dev", tmp_path)
    with pytest.raises(ValueError, match="fold"):
        load_split("mawps", "train", tmp_path, fold=5)
    with pytest.raises(FileNotFoundError, match="Math_23K_train.json.*--data-dir.*HLGT_DATA_DIR"):
        load_split("math23k", "train", tmp_path)
    (tmp_path / "ape210k").mkdir()
    (tmp_path / "ape210k" / "valid.ape.json").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="valid.ape.json holds no readable problem"):
        load_split("ape210k", "valid", tmp_path)
    with pytest.raises(FileNotFoundError, match="train.ape.json"):
        load_split("ape210k", "train", tmp_path)


def test_generic_json_lines_dataset_dir(tmp_path):
    """A data dir laid out like the real one, with files in another layout, reads the same."""
    (tmp_path / "ape210k").mkdir()
    rec = {"id": 5, "segmented_text": "有 3 个", "original_text": "有3个", "equation": "x=3", "ans": 3}
    (tmp_path / "ape210k" / "test.ape.json").write_text(json.dumps([rec]), encoding="utf-8")
    (p,) = load_split("ape210k", "test", tmp_path)
    assert (p.id, p.lang, p.answer, p.source) == ("5", "zh", "3", "ape210k/test.ape.json")


def test_sample_dataset():
    splits = {s: load_split("sample", s) for s in ("train", "valid", "test")}
    ids = [p.id for ps in splits.values() for p in ps]
    assert len(ids) == len(set(ids))
    langs = Counter(p.lang for ps in splits.values() for p in ps)
    assert langs["zh"] >= 40 and langs["en"] >= 40
    assert {p.lang for p in load_split("sample_en", "test")} == {"en"}
    assert sorted(p.name for p in SAMPLE_DIR.iterdir()) == sorted(
        f"{lang}_{split}.json" for lang in ("zh", "en") for split in ("train", "valid", "test"))
    cleaned = load_clean("sample")
    assert len(cleaned["train"].examples) == len(splits["train"]) and not cleaned["train"].dropped
    assert cleaned["train"].constants[:2] == ["1", "100"]
    assert len(cleaned["valid"].examples) == len(splits["valid"])
    assert len(cleaned["test"].examples) == len(splits["test"])
    kinds = Counter(q.kind for ex in cleaned["train"].examples for q in ex.quantities)
    assert all(kinds[k] >= 3 for k in ("integer", "decimal", "fraction", "percentage", "ratio"))
    assert any("(" in q.text and not q.text.startswith("(") for ex in cleaned["train"].examples
               for q in ex.quantities), "the sample has mixed numbers"


def _problems(n, dup_every=7):
    """n problems; every dup_every-th repeats the text of the one before."""
    return [Problem(id=str(i), lang="en", tokens=("q", str(i - (i % dup_every == 0 and i > 0))), equation="x=1",
                    answer="1", source="t") for i in range(n)]


def test_mawps_folds_are_seeded_disjoint_and_keep_duplicates_together():
    problems = _problems(200)
    spec = make_mawps_folds(problems, n_folds=5, seed=3)
    assert spec == make_mawps_folds(problems, n_folds=5, seed=3)
    assert spec["folds"] != make_mawps_folds(problems, n_folds=5, seed=4)["folds"]
    ids = [i for f in spec["folds"] for i in f]
    assert sorted(ids) == sorted(p.id for p in problems)
    assert max(map(len, spec["folds"])) - min(map(len, spec["folds"])) <= 2
    fold_of = {i: k for k, f in enumerate(spec["folds"]) for i in f}
    texts = {}
    for p in problems:
        texts.setdefault(p.tokens, set()).add(fold_of[p.id])
    assert all(len(folds) == 1 for folds in texts.values())
    for k in range(5):
        valid = set(spec["valid"][k])
        assert not valid & set(spec["folds"][k])
        assert abs(len(valid) - 0.1 * (200 - len(spec["folds"][k]))) <= 2
    with pytest.raises(ValueError, match="unique"):
        make_mawps_folds(problems + problems[:1])


def test_graph2tree_folds_are_file_order_chunks_and_valid_shares_no_text_with_train(tmp_path, real_data):
    problems = _problems(200)
    problems += [Problem(id=str(200 + n), lang="en", tokens=problems[i].tokens, equation="x=1", answer="1",
                         source="t") for n, i in enumerate((3, 50, 90))]  # texts repeated far apart
    spec = make_mawps_folds(problems, n_folds=5, seed=3, scheme="graph2tree")
    assert spec["scheme"] == "graph2tree" and make_mawps_folds(problems)["scheme"] == "grouped"
    ids = [p.id for p in problems]
    assert spec["folds"] == [ids[0:40], ids[40:80], ids[80:120], ids[120:160], ids[160:]]  # Graph2Tree's cut
    text = {p.id: p.tokens for p in problems}
    path = tmp_path / "folds.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    straddle = 0
    for k in range(5):
        s = mawps_fold_ids(k, ids, path=path)
        assert not set(s["valid"]) & set(s["test"]) and not set(s["valid"]) & set(s["train"])
        assert not {text[i] for i in s["valid"]} & {text[i] for i in s["train"]}
        straddle += len({text[i] for i in s["test"]} & {text[i] for i in s["train"] + s["valid"]})
        assert abs(len(s["valid"]) - 0.1 * (203 - len(s["test"]))) <= 2
    assert straddle > 0  # unlike the grouped scheme, a text may sit in train and in test
    with pytest.raises(ValueError, match="fold scheme"):
        make_mawps_folds(problems, scheme="random")
    with pytest.raises(ValueError, match="fold scheme"):
        read_split("mawps", "test", real_data, 0, mawps_folds="random")


@pytest.mark.parametrize("scheme", list(MAWPS_FOLD_FILES))
def test_committed_mawps_folds_partition_the_ids(scheme):
    spec = json.loads(MAWPS_FOLD_FILES[scheme].read_text(encoding="utf-8"))
    n = 1921 if scheme == "graph2tree-1921" else 2373
    assert spec["problems"] == n and spec["n_folds"] == 5 and spec["scheme"] == scheme
    all_ids = [i for f in spec["folds"] for i in f]
    outside = spec.get("outside", [])
    assert len(all_ids) == len(set(all_ids)) == n and len(outside) == 2373 - n
    assert not set(outside) & set(all_ids)
    for k in range(5):
        s = mawps_fold_ids(k, path=MAWPS_FOLD_FILES[scheme])
        assert set(s["test"]) == set(spec["folds"][k]) and s["outside"] == outside
        assert not set(s["train"]) & set(s["valid"]) and not set(s["train"]) & set(s["test"])
        assert not set(s["valid"]) & set(s["test"])
        assert len(s["train"]) + len(s["valid"]) + len(s["test"]) == n
        # Without held-out validation (the literature's protocol) train is the other folds whole.
        whole = mawps_fold_ids(k, path=MAWPS_FOLD_FILES[scheme], valid=False)
        assert whole["valid"] == [] and whole["test"] == s["test"]
        assert whole["train"] == [i for j, f in enumerate(spec["folds"]) if j != k for i in f]


def test_graph2tree_1921_folds_cut_only_the_kept_problems(tmp_path, monkeypatch):
    """Graph2Tree's code: keep the listed problems, cut them in file order; the rest train and test nowhere."""
    problems = _problems(100)
    kept = [p.id for p in problems if int(p.id) % 4]  # 75 of 100
    path = tmp_path / "kept.json"
    path.write_text(json.dumps({"kept": kept}), encoding="utf-8")
    monkeypatch.setattr(splits, "MAWPS_GRAPH2TREE_KEPT", path)
    spec = make_mawps_folds(problems, scheme="graph2tree-1921")
    assert spec["problems"] == 75 and spec["outside"] == [p.id for p in problems if int(p.id) % 4 == 0]
    assert spec["folds"] == [kept[0:15], kept[15:30], kept[30:45], kept[45:60], kept[60:]]
    folds = tmp_path / "folds.json"
    folds.write_text(json.dumps(spec), encoding="utf-8")
    for k in range(5):
        s = mawps_fold_ids(k, [p.id for p in problems], path=folds, valid=False)
        assert sorted(s["train"] + s["test"], key=int) == kept
    path.write_text(json.dumps({"kept": kept + ["no-such-id"]}), encoding="utf-8")
    with pytest.raises(ValueError, match="not in MAWPS.json"):
        make_mawps_folds(problems, scheme="graph2tree-1921")


def test_mawps_fold_file_must_match_the_data(tmp_path):
    with pytest.raises(ValueError, match="does not match"):
        mawps_fold_ids(0, file_ids=["1", "2"])
    with pytest.raises(FileNotFoundError, match="--write-mawps-folds"):
        mawps_fold_ids(0, path=tmp_path / "none.json")


@pytest.mark.realdata
def test_an_unreadable_mawps_record_is_a_counted_skip_that_leaves_the_folds_alone(real_data, tmp_path, capsys):
    from hlgt.commands.splits import main as write_folds

    records = json.loads((real_data / "mawps" / "MAWPS.json").read_text(encoding="utf-8"))
    bad_id = str(records[10]["id"])
    records[10]["ans"] = [1]
    (tmp_path / "mawps").mkdir()
    (tmp_path / "mawps" / "MAWPS.json").write_text(json.dumps(records), encoding="utf-8")
    for k in range(5):
        for split in ("train", "valid", "test"):
            whole, edited = read_split("mawps", split, real_data, k), read_split("mawps", split, tmp_path, k)
            assert [p.id for p in edited.problems] == [p.id for p in whole.problems if p.id != bad_id]
            assert edited.skipped == whole.skipped + (Counter(bad_field_type=1) if split == "train" else Counter())
    with pytest.raises(ValueError, match=r"1 record\(s\) cannot be read \(bad_field_type 1; the first: .*mend"):
        write_folds(["--write-mawps-folds", "--data-dir", str(tmp_path)])
    # A byte that is not UTF-8 costs the record, which keeps its fold; a record without a readable
    # id asks for the record to be mended, not the folds.
    text = (real_data / "mawps" / "MAWPS.json").read_bytes()
    start = text.index(b'"id": ' + bad_id.encode() + b",")
    at = text.index(b'"segmented_text": "', start) + len(b'"segmented_text": "')
    (tmp_path / "mawps" / "MAWPS.json").write_bytes(text[:at] + b"\xe9" + text[at:])
    test = read_split("mawps", "test", tmp_path, 0)
    assert [p.id for p in test.problems] == [p.id for p in read_split("mawps", "test", real_data, 0).problems
                                             if p.id != bad_id]
    (tmp_path / "mawps" / "MAWPS.json").write_bytes(text[:start] + b'"id": [' + bad_id.encode() + b"]"
                                                      + text[start + 6 + len(bad_id):])
    with pytest.raises(ValueError, match=r"1 record\(s\) cannot be read .*mend the records, not the folds"):
        read_split("mawps", "test", tmp_path, 0)


@pytest.mark.realdata
def test_real_math23k_clean(real_data):
    result = load_clean("math23k", real_data)
    assert len(result["train"].examples) >= 20740  # >= 98% of 21,162
    assert result["train"].dropped == Counter(unparseable_equation=1, value_mismatch=2, rare_constant=7)
    assert result["train"].constants == ["1", "3.14"]
    for split in ("valid", "test"):
        assert len(result[split].examples) == 1000 and not result[split].dropped
    assert result["valid"].unrepresentable == Counter(unparseable_equation=1, value_mismatch=1)


@pytest.mark.realdata
def test_real_mawps_folds_keep_every_test_problem(real_data):
    for fold in range(5):
        reads = {s: read_split("mawps", s, real_data, fold) for s in ("train", "valid", "test")}
        assert sum(len(r.problems) for r in reads.values()) == 2373
        result = load_clean("mawps", real_data, fold)
        assert len(result["test"].examples) == len(reads["test"].problems)
        assert len(result["valid"].examples) == len(reads["valid"].problems)
        assert len(result["train"].examples) >= 0.96 * len(reads["train"].problems)


@pytest.mark.realdata
def test_real_graph2tree_1921_folds_count_what_they_leave_out(real_data):
    for fold in (0, 4):
        reads = {s: read_split("mawps", s, real_data, fold, "graph2tree-1921", mawps_valid=False)
                 for s in ("train", "valid", "test")}
        assert reads["train"].skipped == Counter(outside_the_folds=452)
        assert ((len(reads["train"].problems), len(reads["test"].problems))
                == ((1537, 384) if fold == 0 else (1536, 385)))
        assert not reads["valid"].problems
    assert read_split("mawps", "test", real_data, 0, "graph2tree-1921").problems[-1].id == "490"


@pytest.mark.realdata
@pytest.mark.parametrize("scheme,seen", [("grouped", [0] * 5), ("graph2tree", [74, 75, 71, 73, 58])])
def test_real_mawps_test_texts_seen_in_training(scheme, seen, real_data):
    """How many test problems of each fold have their text among the fold's train + valid problems."""
    counts = []
    for fold in range(5):
        reads = {s: read_split("mawps", s, real_data, fold, scheme).problems for s in ("train", "valid", "test")}
        assert sum(map(len, reads.values())) == 2373
        trained = {" ".join(p.tokens).casefold() for p in reads["train"] + reads["valid"]}
        counts.append(sum(" ".join(p.tokens).casefold() in trained for p in reads["test"]))
    assert counts == seen

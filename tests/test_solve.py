"""Solving new problems: tokenising raw text, and the CLI on a model trained briefly on the sample data."""
import math

import pytest

from hlgt.config import Config
from hlgt.expr import infix_to_prefix, tokenize_infix
from hlgt.solve import main, solve_text, tokenize

TINY = {"data.dataset": "sample", "train.epochs": 2, "train.lr_step": 1, "train.batch_size": 16,
        "model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1,
        "model.beam_size": 2, "model.max_output_len": 16, "train.wandb": False, "train.threads": 1}
ZH = "一根绳子长12米，用去了(1/4)，还剩多少米？"
EN = "A farmer has 120 apples. He sells 3/4 of them. How many apples does he sell?"


def test_chinese_numbers_stay_whole():
    tokens = tokenize("商店运来苹果1,200.5千克，卖了35%，又运来(1/5)和1(5/6)吨，比是3:7。", "zh")
    for number in ("1,200.5", "35%", "(1/5)", "1(5/6)", "3:7"):
        assert number in tokens
    assert "".join(tokens) == "商店运来苹果1,200.5千克，卖了35%，又运来(1/5)和1(5/6)吨，比是3:7。"


def test_english_splits_punctuation():
    assert tokenize("He sells 3/4 of 1,200 apples, i.e. 75%.", "en") == \
        ["He", "sells", "3/4", "of", "1,200", "apples", ",", "i", ".", "e", ".", "75%", "."]
    with pytest.raises(ValueError, match="language"):
        tokenize("x", "fr")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from hlgt.data.build import ensure_shards
    from hlgt.train import loop

    cfg = Config.from_flat({**TINY, "data.shards_dir": str(tmp_path_factory.mktemp("processed"))})
    run = tmp_path_factory.mktemp("run")
    loop.train(cfg, ensure_shards(cfg), run_dir=run)
    return run / "best"


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


def test_cli_needs_a_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="best/ folder"):
        solve_text(tmp_path, EN)


@pytest.mark.parametrize("bf16", [False, True])
def test_evaluate_cli_scores_a_split_from_the_model_folder(model_dir, tmp_path, capsys, bf16):
    from hlgt.data.build import load_rows, shards_path
    from hlgt.train.evaluate import main as evaluate_main, read_predictions

    assert evaluate_main(["--model", str(model_dir), "--split", "test", "--out", str(tmp_path)]
                         + (["--bf16"] if bf16 else [])) == 0
    out = capsys.readouterr().out
    predictions = read_predictions(tmp_path / "predictions_test.jsonl")
    flat = __import__("json").loads((model_dir / "run_config.json").read_text())["config"]
    test_rows = load_rows(shards_path(Config.from_flat({k: v for k, v in flat.items() if k.startswith("data.")})), "test")
    assert [p["id"] for p in predictions] == [str(r["id"]) for r in test_rows]
    value_acc = sum(p["value_correct"] for p in predictions) / len(predictions)
    assert f"value accuracy {100 * value_acc:.1f}%" in out and ("bfloat16" in out) == bf16
    assert (tmp_path / "numbers_test.md").is_file()

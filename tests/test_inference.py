"""Inference: loading a model folder, batched prediction in row order, readable equations and answers."""
import json
import shutil

import pytest
import torch

from hlgt import inference
from hlgt.expr import infix_with_numbers
from hlgt.inference import load_model, predict, run_config


def test_infix_substitutes_numbers():
    assert infix_with_numbers(["*", "-", "N0", "1", "N1"], ["11", "2"]) == "(11-1)*2"
    assert infix_with_numbers(["*", "N0", "N1"], ["(2/5)", "20%"]) == "(2/5)*20%"
    assert infix_with_numbers(["+", "N0"], ["1"]) == "+ N0"  # malformed stays readable
    assert infix_with_numbers(None, []) == ""


def test_predict_decodes_by_length_but_returns_row_order(monkeypatch):
    """Batches are formed by text length; every prediction still lands on its own row, and the
    call's decoding settings reach ``Solver.solve``."""
    rows = [{"id": str(i), "tokens": ["w"] * n} for i, n in enumerate([9, 2, 7, 1, 5, 3, 8])]
    seen_batches = []

    def fake_collate(chunk, vocab, variant):
        seen_batches.append([len(r["tokens"]) for r in chunk])
        return type("B", (), {"ids": [r["id"] for r in chunk], "to": lambda self, device: self})()

    solve_calls = []

    class EchoSolver(torch.nn.Module):
        def solve(self, batch, beam_size, beam_batch, bf16_inference):
            solve_calls.append((beam_batch, bf16_inference))
            return [[f"N{b}"] for b in batch.ids]  # the row's own id, to check placement

    monkeypatch.setattr(inference, "collate", fake_collate)
    out = predict(EchoSolver(), rows, vocab=None, variant="srl", beam_size=1, batch_size=3)
    assert out == [[f"N{i}"] for i in range(len(rows))]
    assert seen_batches == [[1, 2, 3, 5, 7, 8, 9]] and solve_calls == [(6, None)]  # one encoder batch of up to 4 x 3
    seen_batches.clear()
    solve_calls.clear()
    monkeypatch.setattr(inference, "ENCODE_BATCHES", 1)
    out = predict(EchoSolver(), rows, vocab=None, variant="srl", beam_size=1, batch_size=3, bf16_inference=True)
    assert out == [[f"N{i}"] for i in range(len(rows))]
    assert seen_batches == [[1, 2, 3], [5, 7, 8], [9]] and solve_calls == [(6, True)] * 3


def test_load_model_needs_a_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="must be a model folder written by training"):
        load_model(tmp_path)


def test_a_run_config_without_a_newer_key_reads_its_default(model_dir, tmp_path):
    copy = tmp_path / "best"
    shutil.copytree(model_dir, copy)
    path = copy / "run_config.json"
    run = json.loads(path.read_text())
    del run["config"]["train.capture_bigrus"]
    path.write_text(json.dumps(run))
    assert run_config(copy)["train.capture_bigrus"] is False


def test_load_model_shares_one_solver_and_copies_the_config(model_dir):
    solver, flat = load_model(model_dir)
    again, flat_again = load_model(str(model_dir))
    assert again is solver and not solver.training
    assert flat_again == flat and flat_again is not flat
    assert flat["data.dataset"] == "sample"


@pytest.mark.parametrize("edit, fault", [
    (lambda run: {}, 'no "config" object'),
    (lambda run: {**run, "config": {**run["config"], "model.bogus": 3}}, r"unknown config keys \['model.bogus'\]"),
    (lambda run: {**run, "config": {**run["config"], "model.heads": 0}}, "bad config: model.heads=0"),
    (lambda run: {**run, "config": {}}, 'its "config" lacks data.dataset, data.graph, data.annotator'),
])
def test_a_damaged_run_config_names_the_file(model_dir, tmp_path, edit, fault):
    copy = tmp_path / "best"
    shutil.copytree(model_dir, copy)
    path = copy / "run_config.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    with pytest.raises(ValueError, match=f"run_config.json is damaged: {fault}"):
        load_model(copy)


def test_a_folder_whose_two_configs_describe_different_models_is_refused(model_dir, tmp_path):
    # run_config.json says what the pages and solve read (encoder, beam), config.json what the
    # weights are: a folder put together from two runs would print one model's settings for another's.
    folder = tmp_path / "mixed"
    shutil.copytree(model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model.beam_size": 4}))
    with pytest.raises(ValueError, match=r"run_config.json and the model's config.json describe different models "
                                         r"\(model.beam_size\)"):
        load_model(folder)

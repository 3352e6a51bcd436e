"""hlgt.config's shared answers: where runs are stored (``$HLGT_STORAGE``, local paths or URIs) and
which ablation arms exist, checked the same way by every command that takes ``--ablation``."""
import os
import re
from pathlib import Path

import numpy as np
import pytest

from hlgt import config as C
from hlgt import storage
from hlgt.ray_session import ray_address


def test_storage_follows_hlgt_storage(tmp_path, monkeypatch):
    monkeypatch.delenv("HLGT_STORAGE", raising=False)
    assert storage.shared_storage() == "" and storage.storage_path("runs") == "runs"
    assert storage.storage_root(None, "runs/sweeps", "sweeps") == str((Path.cwd() / "runs" / "sweeps").resolve())
    assert storage.storage_root(str(tmp_path), "runs", "runs") == str(tmp_path)
    monkeypatch.setenv("HLGT_STORAGE", "s3://bucket/hlgt/")
    assert storage.shared_storage() == "s3://bucket/hlgt"
    assert storage.storage_path("datasets", "processed") == "s3://bucket/hlgt/datasets/processed"
    assert storage.storage_root(None, "runs", "sweeps") == "s3://bucket/hlgt/sweeps"
    assert C.Config().train.out_dir == "s3://bucket/hlgt/runs"
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    assert storage.storage_root(None, "elsewhere", "runs") == str(tmp_path / "runs")


def test_a_command_runs_its_own_ray_unless_given_one(monkeypatch):
    # Not whatever `ray start` left on this machine; a Ray job's command runs on the job's cluster.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_address(None) == "local" and ray_address("auto") == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert ray_address(None) == "10.0.0.5:6379" and ray_address("ray://head:10001") == "ray://head:10001"


def test_is_uri():
    assert storage.is_uri("s3://bucket/x") and storage.is_uri("gs://b")
    assert not storage.is_uri("/mnt/nfs/hlgt") and not storage.is_uri("runs/sweeps")


def test_ablation_arms_are_checked_in_one_place():
    assert C.check_ablation("gts") == "gts"
    assert C.ablation_arms("all") == list(C.ABLATIONS)
    assert C.ablation_arms(" gts, full") == ["gts", "full"] and C.ablation_arms(["hgt"]) == ["hgt"]
    with pytest.raises(ValueError, match="unknown ablation arm 'nope'; the arms are full, no_node_type, "):
        C.ablation_arms("gts,nope")


@pytest.mark.parametrize("module", ["hlgt.commands.train", "hlgt.commands.bench", "hlgt.commands.curve"])
def test_every_command_rejects_an_unknown_arm_alike(module):
    import importlib

    main = importlib.import_module(module).main
    with pytest.raises(ValueError, match="unknown ablation arm 'nope'; the arms are full, "):
        main(["--dataset", "sample", "--ablation", "nope"])


@pytest.mark.parametrize("flat, named", [
    ({"model.heads": 3}, "model.heads=3"), ({"model.heads": 0}, "model.heads=0"),
    ({"model.dropout": 1.0}, "model.dropout"), ({"train.batch_size": 0}, "train.batch_size"),
    ({"train.epochs": 0}, "train.epochs"), ({"model.beam_size": 0}, "model.beam_size"),
    ({"train.cuda_graphs": True, "train.workers": 2}, "train.cuda_graphs=True runs .* in one process"),
    ({"train.cuda_graphs": True, "model.encoder": "hgt"}, "train.cuda_graphs=True runs the hlgt and none encoders"),
    ({"train.capture_bigrus": True}, "train.capture_bigrus=True needs train.cuda_graphs=true"),
    ({"train.lr": float("nan")}, "train.lr=nan must be a finite number > 0"), ({"train.lr": "inf"}, "train.lr=inf"),
    ({"train.lr": 0}, "train.lr=0.0"), ({"train.lr": -1e-3}, "train.lr=-0.001"),
    ({"train.lr_gamma": 0}, "train.lr_gamma=0.0"), ({"train.lr_gamma": "nan"}, "train.lr_gamma=nan"),
    ({"train.weight_decay": "inf"}, "train.weight_decay=inf"), ({"model.beta_com": "inf"}, "model.beta_com=inf"),
    ({"train.grad_clip": "nan"}, "train.grad_clip=nan"), ({"train.max_minutes": "-inf"}, "train.max_minutes=-inf"),
    ({"data.dataset": "math23k", "data.fold": 3}, "data.fold=3 must be 0: math23k has no folds"),
    ({"data.dataset": "mawps", "data.fold": 5}, "data.fold=5 must lie in 0..4 for MAWPS"),
    ({"model.embedding_size": 1e11}, "model.embedding_size=100000000000 must lie in 1..16384"),
    ({"model.hidden_size": 1 << 20, "model.heads": 1}, "model.hidden_size=1048576"),
    ({"model.layers": 10_000}, "model.layers=10000"), ({"model.beam_size": 10**6}, "model.beam_size=1000000"),
    ({"model.max_output_len": 10**7}, "model.max_output_len=10000000"),
    ({"data.graph": "sr"}, "data.graph='sr' must be one of srl, parse, quantity_cell, nc"),
    ({"model.encoder": "foo"}, "model.encoder='foo' must be one of hlgt, hgt, rgat, none"),
    ({"model.comparison_init": "bar"}, "model.comparison_init='bar' must be one of zeros, uniform"),
    ({"data.annotator": "spacy"}, "data.annotator='spacy' must be one of offline, ltp, hanlp"),
    ({"data.min_const_freq": 0}, "data.min_const_freq=0 must be >= 1"),
    ({"train.seed": -5}, "train.seed=-5 must lie in 0..9223372036854775807"),
    ({"train.seed": 1e30}, "train.seed=1000000"),
])
def test_an_unworkable_value_fails_when_the_config_is_made(flat, named):
    with pytest.raises(ValueError, match=f"bad config: {named}"):
        C.Config.from_flat(flat)


@pytest.mark.parametrize("key", ["train.lr", "model.dropout", "train.max_minutes", "model.beta_com"])
@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_a_boolean_is_no_number(key, value):
    # YAML reads `lr: yes` as True: not lr = 1.0.
    with pytest.raises(ValueError, match=f"config key '{key}' expects float, got {re.escape(repr(value))}"):
        C.Config.from_flat({key: value})


def test_the_names_of_choices_are_the_code_s():
    from hlgt.data import srl
    from hlgt.model import comparison, encoder

    assert srl.ANNOTATORS is C.ANNOTATORS and encoder.ENCODERS is C.ENCODERS
    assert comparison.COMPARISON_INITS is C.COMPARISON_INITS
    for name in C.ANNOTATORS:
        C.Config.from_flat({"data.annotator": name})


def test_unknown_keys_are_named_whatever_their_type():
    with pytest.raises(ValueError, match=r"unknown config keys \[1, 'foo'\]"):
        C.Config.from_flat({1: 2, "foo": 3})


def test_local_paths_are_made_absolute_where_the_command_runs(tmp_path, monkeypatch):
    # A saved run config then means the same folders from any directory (evaluate from elsewhere
    # once built a second shard folder there).
    monkeypatch.chdir(tmp_path)
    cfg = C.Config.from_flat({"data.shards_dir": "processed", "train.out_dir": "~/runs", "data.data_dir": "s3://b/d"})
    assert cfg.data.shards_dir == str(tmp_path / "processed")
    assert cfg.train.out_dir == os.path.expanduser("~/runs") and cfg.data.data_dir == "s3://b/d"
    assert cfg.train.word_vectors == ""  # unset stays unset
    monkeypatch.chdir(tmp_path.parent)
    assert C.Config.from_flat(cfg.to_flat()).data.shards_dir == str(tmp_path / "processed")


def test_a_hand_edited_model_config_with_a_size_beyond_reason_is_one_line(model_dir, tmp_path, capsys):
    import json
    import shutil

    from hlgt.commands.cli import run_command
    from hlgt.commands.solve import main

    edited = tmp_path / "best"
    shutil.copytree(model_dir, edited)
    saved = json.loads((edited / "run_config.json").read_text())
    saved["config"]["model.embedding_size"] = 1e11
    (edited / "run_config.json").write_text(json.dumps(saved))
    assert run_command(main, "python -m hlgt.solve", ["--model", str(edited), "Tom has 3 apples and 4 pears."]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model.embedding_size=100000000000 must lie in 1..16384" in err


@pytest.mark.parametrize("file, key, said", [
    ("config.json", "model.max_output_len", "config.json lacks model.max_output_len"),
    ("run_config.json", "model.max_output_len", 'run_config.json is damaged: its "config" lacks model.max_output_len'),
    ("config.json", "model.bogus", "config.json: unknown config keys ['model.bogus']"),
])
def test_a_model_folder_of_other_keys_is_one_line_naming_its_file(model_dir, tmp_path, capsys, file, key, said):
    # A lacking key would load as today's default: the model trained with max_output_len 16, not 45.
    import json
    import shutil

    from hlgt.commands.cli import run_command
    from hlgt.commands.solve import main

    edited = tmp_path / "best"
    shutil.copytree(model_dir, edited)
    saved = json.loads((edited / file).read_text())
    flat = saved["config"] if file == "run_config.json" else saved
    if key in flat:
        del flat[key]
    else:
        flat[key] = 1
    (edited / file).write_text(json.dumps(saved))
    assert run_command(main, "python -m hlgt.solve", ["--model", str(edited), "Tom has 3 apples and 4 pears."]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{edited / file}" in err and said in err, err

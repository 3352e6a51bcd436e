"""hlgt-bench runs end to end on the sample data (a smoke test of the command: the speed
figures themselves are measurements for BENCHMARKS.md, never asserted)."""
import re

import pytest
import torch

from hlgt.commands.bench import main


@pytest.mark.usefixtures("one_thread")
def test_bench_prints_both_arms_with_bf16_decoding(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))  # shards built under tmp_path
    assert main(["--dataset", "sample", "--ablation", "full,gts", "--limit", "32", "--decode-limit", "8",
                 "--batch-size", "16", "--embedding", "8", "--hidden", "16", "--beam-size", "2", "--threads", "1",
                 "--bf16", "--set", "model.heads=2", "--set", "model.layers=1"]) == 0
    out = capsys.readouterr().out
    assert "8 held-out problems decoded (8 training, 0 validation)" in out
    rows = [line for line in out.splitlines() if line.startswith("| full |") or line.startswith("| gts |")]
    assert len(rows) == 2 and all(len(r.split("|")) == 10 for r in rows)
    assert "| 1.00 | 1.00 |" in rows[1]  # gts is the reference of the ratios


def test_bench_rejects_unknown_arms():
    with pytest.raises(ValueError, match="unknown ablation arm 'nope'"):
        main(["--dataset", "sample", "--ablation", "full,nope"])


@pytest.mark.parametrize("argv, message", [
    (["--profile", "0"], "argument --profile: must be >= 1, got 0"),  # not "no profile": the full benchmark
    (["--beam-size", "0"], "argument --beam-size: must be >= 1, got 0"),
    (["--limit", "-1"], "argument --limit: must be >= 1, got -1"),
    (["--device", "foo"], "argument --device: not a torch device: 'foo'"),
    (["--profile", "2", "--replay", "2"], "argument --replay: not allowed with argument --profile"),
])
def test_bench_refuses_bad_options_naming_them(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        main(["--dataset", "sample", *argv])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_set_may_not_name_a_key_a_flag_of_the_command_sets():
    with pytest.raises(ValueError, match="--set model.hidden_size=... and --hidden both set model.hidden_size"):
        main(["--dataset", "sample", "--hidden", "32", "--set", "model.hidden_size=64"])
    with pytest.raises(ValueError, match="--set train.use_gpu=... and --device both set"):  # it would be ignored
        main(["--dataset", "sample", "--set", "train.use_gpu=true"])


def test_too_few_rows_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    with pytest.raises(ValueError, match="only 2 training rows: need at least two batches"):
        main(["--dataset", "sample", "--limit", "2", "--batch-size", "16"])


def _profile(tmp_path, steps: int = 2, **flat) -> dict:
    """``profile_steps`` of a tiny model over ``steps`` steps of the sample data."""
    from hlgt.config import Config
    from hlgt.data.build import ensure_shards
    from hlgt.data.shards import load_rows, load_vocab
    from hlgt.train.bench import profile_steps

    cfg = Config.from_flat({"data.dataset": "sample", "data.shards_dir": str(tmp_path), "train.batch_size": 16,
                            "model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1,
                            **flat})
    shards = ensure_shards(cfg)
    return profile_steps(cfg, load_rows(shards, "train"), load_vocab(shards), steps=steps)


@pytest.mark.usefixtures("one_thread")
def test_profile_counts_operators_and_host_syncs_per_step(tmp_path):
    r = _profile(tmp_path)
    assert r["ops_per_step"] == r["cpu_gru_ops_per_step"] + r["other_ops_per_step"] > r["top_level_ops_per_step"] > 0
    assert r["cpu_gru_ops_per_step"] > 0 and r["optimizer_ops_per_step"] > 0
    # Kernels: fewer than the operators outside the BiGRUs (views, allocations and parents launch none).
    assert 0 < r["launching_ops_per_step"] < 0.8 * r["other_ops_per_step"]
    # Collate checked the batches: the encoder reads no lengths or graph index back.
    assert r["syncs_per_step"] == sum(r["syncs"].values()) and r["syncs_per_step"] < 20
    with pytest.raises(ValueError, match="needs 101"):
        _profile(tmp_path, steps=100)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_compiled_decoder_levels_dispatch_fewer_operators(tmp_path):
    eager, compiled = _profile(tmp_path), _profile(tmp_path, **{"train.compile": True})
    assert compiled["other_top_level_ops_per_step"] < 0.9 * eager["other_top_level_ops_per_step"]
    assert compiled["syncs_per_step"] <= eager["syncs_per_step"]


def test_a_host_sync_is_placed_at_the_model_line_and_the_library_line():
    import traceback
    import warnings

    from hlgt.train import bench

    def frame(path, line):
        return traceback.FrameSummary(path, line, "f")

    model = frame("/x/hlgt/model/hlgt_conv.py", 178)
    library = frame("/y/torch_geometric/utils/_softmax.py", 40)
    assert bench.sync_place([frame("/x/hlgt/train/bench.py", 9), model]) == "hlgt_conv.py:178"
    assert bench.sync_place([model, library, frame("/usr/lib/warnings.py", 1)]) == "hlgt_conv.py:178 (_softmax.py:40)"
    assert bench.sync_place([library]) == "? (_softmax.py:40)"
    # The recorder keeps the sync warnings' places and lets every other warning through.
    places = []
    with warnings.catch_warnings(record=True) as passed:
        warnings.simplefilter("always")
        with bench.recorded_syncs(places):
            warnings.warn("called a synchronizing CUDA operation")
            warnings.warn("something else")
    assert len(places) == 1 and places[0].startswith("? (test_bench.py:")
    assert [str(w.message) for w in passed] == ["something else"]


def test_busy_time_is_the_union_of_kernel_intervals():
    from hlgt.train.bench import busy_us

    assert busy_us([]) == 0
    assert busy_us([(5, 7), (0, 2), (1, 3), (6, 6.5)]) == 3 + 2  # [0, 3] and [5, 7]


@pytest.mark.usefixtures("one_thread")
def test_time_steps_prints_the_host_side_on_the_cpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    assert main(["--dataset", "sample", "--ablation", "full", "--limit", "48", "--batch-size", "16", "--embedding", "8",
                 "--hidden", "16", "--threads", "1", "--device", "cpu", "--time-steps", "2",
                 "--set", "model.heads=2", "--set", "model.layers=1"]) == 0
    out = capsys.readouterr().out
    assert "[bench] full: operators by host time" in out and "Self CPU" in out
    assert "operators by device time" not in out  # no GPU: no kernel time to split
    line = next(x for x in out.splitlines() if x.startswith("[bench] full: ") and "ms per step" in x)
    assert float(line.split()[2]) > 0 and "GPU" not in line
    outside, inside = (float(x) for x in re.findall(r"([\d.]+) ms (?:outside|in them)", line))
    assert outside > 0 and inside > 0 and outside + inside == pytest.approx(float(line.split()[2]), abs=0.11)
    with pytest.raises(ValueError, match=r"3 batches: --time-steps 100 needs 101 \(raise --limit\)"):
        main(["--dataset", "sample", "--ablation", "full", "--limit", "48", "--batch-size", "16", "--embedding", "8",
              "--hidden", "16", "--threads", "1", "--device", "cpu", "--time-steps", "100"])
    with pytest.raises(ValueError, match=r"train.cuda_graphs captures CUDA graphs: it needs a GPU"):
        main(["--dataset", "sample", "--ablation", "full", "--limit", "48", "--batch-size", "16", "--embedding", "8",
              "--hidden", "16", "--threads", "1", "--device", "cpu", "--time-steps", "2",
              "--set", "train.cuda_graphs=true"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("bigrus", ["false", "true"])
def test_time_steps_on_a_gpu_profiles_the_replayed_step(tmp_path, capsys, monkeypatch, bigrus):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    assert main(["--dataset", "sample", "--ablation", "full,gts", "--limit", "48", "--batch-size", "16",
                 "--embedding", "8", "--hidden", "16", "--device", "cuda", "--time-steps", "2",
                 "--set", "model.heads=2", "--set", "model.layers=1", "--set", "train.cuda_graphs=true",
                 "--set", f"train.capture_bigrus={bigrus}"]) == 0
    out = capsys.readouterr().out
    notes = [x for x in out.splitlines() if "profiled steps: cuda graphs: " in x]
    assert len(notes) == 2 and all(" 2 batches replayed, 0 eager" in x for x in notes)
    assert sum("GPU running kernels" in x for x in out.splitlines()) == 2


def test_replay_needs_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    with pytest.raises(ValueError, match=r"--replay captures a CUDA graph: it needs a GPU \(--device cuda\)"):
        main(["--dataset", "sample", "--ablation", "gts", "--limit", "48", "--batch-size", "16", "--embedding", "8",
              "--hidden", "16", "--threads", "1", "--device", "cpu", "--replay", "2"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_replay_on_a_gpu_trains_the_captured_step(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    assert main(["--dataset", "sample", "--ablation", "full,gts", "--limit", "48", "--batch-size", "16",
                 "--embedding", "8", "--hidden", "16", "--device", "cuda", "--replay", "3",
                 "--set", "model.heads=2", "--set", "model.layers=1"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "replayed" in x]
    assert len(lines) == 2 and all(x.startswith(("[bench] full:", "[bench] gts:")) for x in lines)


def test_recurrence_needs_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    with pytest.raises(ValueError, match=r"--recurrence captures CUDA graphs: it needs a GPU \(--device cuda\)"):
        main(["--dataset", "sample", "--ablation", "gts", "--limit", "48", "--batch-size", "16", "--embedding", "8",
              "--hidden", "16", "--threads", "1", "--device", "cpu", "--recurrence", "2"])


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("arm", ["full", "gts"])
def test_the_recurrence_ways_give_the_packed_states_over_padded_and_cut_batches(tmp_path, arm):
    from hlgt.config import ABLATIONS, Config
    from hlgt.data.build import ensure_shards
    from hlgt.data.collate import encode
    from hlgt.data.shards import load_rows, load_vocab
    from hlgt.train.bench import _training, recurrence_ways, ways_gap

    cfg = Config.from_flat({"data.dataset": "sample", "data.shards_dir": str(tmp_path), "train.batch_size": 8,
                            "model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1,
                            **ABLATIONS[arm]})
    shards = ensure_shards(cfg)
    vocab = load_vocab(shards)
    solver, _, batches = _training(cfg, vocab, encode(load_rows(shards, "train"), vocab), torch.device("cpu"))
    ways, lengths = recurrence_ways(solver, batches, 3, torch.device("cpu"))
    assert [len(w) for w in ways.values()] == [3, 3, 3]
    assert all(own <= padded for own, padded in zip(lengths["own"], lengths["padded"]))
    assert any(own < padded for own, padded in zip(lengths["own"], lengths["padded"]))  # the shapes have room
    assert [b.tokens.size(1) for b, _ in ways["causal_own"]] == lengths["own"]
    assert ways_gap(solver.encoder, ways) < 1e-5 and solver.training
    with pytest.raises(ValueError, match=r"fit a learned shape: --recurrence 99 needs 99 \(raise --limit\)"):
        recurrence_ways(solver, batches, 99, torch.device("cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_recurrence_on_a_gpu_prints_the_four_ways(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    assert main(["--dataset", "sample", "--ablation", "full,gts", "--limit", "48", "--batch-size", "8",
                 "--embedding", "8", "--hidden", "16", "--device", "cuda", "--recurrence", "2",
                 "--set", "model.heads=2", "--set", "model.layers=1"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "ms per batch" in x]
    assert len(lines) == 2 and all("causal over its own longest" in x for x in lines)


def test_kernel_profile_counts_no_kernels_on_the_cpu():
    from hlgt.train.bench import kernel_profile

    k = kernel_profile(lambda: torch.ones(3).add_(1), 2, torch.device("cpu"))
    assert k["per_step"] == 0 and k["busy_ms_per_step"] == 0 and "aten::add_" in k["table"]


@pytest.mark.usefixtures("one_thread")
def test_bench_with_cuda_graphs_prints_what_capturing_cost(tmp_path, capsys, monkeypatch, stand_in_graphs):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    assert main(["--dataset", "sample", "--ablation", "gts", "--limit", "48", "--decode-limit", "8",
                 "--batch-size", "8", "--embedding", "8", "--hidden", "16", "--beam-size", "1", "--threads", "1",
                 "--set", "train.cuda_graphs=true"]) == 0
    out = capsys.readouterr().out
    assert "[bench] gts: timed pass: cuda graphs: 5 batches replayed, 0 eager" in out
    line = re.search(r"\[bench\] gts: the pass before it: [\d.]+ s, (\d+) shapes captured at their first "
                     r"batches: at most -?[\d.]+ s a capture beyond its step", out)
    assert line and int(line.group(1)) == len(stand_in_graphs) > 0


def test_cuda_graphs_need_a_gpu_to_be_timed(tmp_path, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    with pytest.raises(ValueError, match="train.cuda_graphs captures CUDA graphs: it needs a GPU"):
        main(["--dataset", "sample", "--ablation", "gts", "--limit", "48", "--batch-size", "16", "--embedding", "8",
              "--hidden", "16", "--threads", "1", "--device", "cpu", "--set", "train.cuda_graphs=true"])

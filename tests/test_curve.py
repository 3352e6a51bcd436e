"""hlgt.train.curve runs end to end on the sample data: every arm, every epoch, every diagnostic
column (the curves themselves are measurements for BENCHMARKS.md, never asserted)."""
import json
from pathlib import Path

import pytest

from hlgt import config as C
from hlgt import metrics as M
from hlgt.commands.curve import main, parse_arms

TINY = ["--dataset", "sample", "--limit", "40", "--val-limit", "6", "--epochs", "2", "--threads", "1",
        "--set", "model.hidden_size=16", "--set", "model.embedding_size=8", "--set", "model.heads=2",
        "--set", "model.layers=1", "--set", "model.beam_size=2", "--set", "train.batch_size=16"]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_curve_trains_the_arms_side_by_side(tmp_path, capfd, monkeypatch, jobs):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))  # shards built under tmp_path
    out_dir = tmp_path / "curve"
    assert main([*TINY, "--ablation", "gts,full+model.beta_com=0.5", "--jobs", jobs, "--out", str(out_dir)]) == 0
    out = capfd.readouterr().out  # the arms' processes print to the same file descriptor
    assert "the first 40 training and 6 validation problems" in out
    assert "[gts] epoch 2/2" in out and "[full+model.beta_com=0.5] epoch 2/2" in out
    table = [line for line in out.splitlines() if line.startswith("| 1 | ") or line.startswith("| 2 | ")]
    assert len(table) == 4 + 2  # two arms x two epochs, then two rows of the side-by-side curves
    saved = json.loads((out_dir / "curve.json").read_text())
    histories = saved["histories"]
    assert list(histories) == ["gts", "full+model.beta_com=0.5"]
    for arm, history in histories.items():
        assert [m[M.EPOCH] for m in history] == [1, 2]
        for m in history:
            assert 0 <= m[M.VAL_VALUE_ACC] <= 1 and m[M.VAL_TREE_LOSS] > 0 and m[M.TRAIN_GRAD_NORM_MAX] > 0
            assert m[M.grad_norm_metric("decoder")] > 0 and m[M.scale_metric("h_b")] > 0
    assert M.grad_norm_metric("graph") not in histories["gts"][0]
    assert histories["full+model.beta_com=0.5"][0][M.grad_norm_metric("graph")] > 0
    assert json.loads((out_dir / "full_model.beta_com_0.5" / "checkpoint" / "config.json").read_text())[
        "model.beta_com"] == 0.5
    assert (out_dir / "curve.md").read_text().count("\n| 2 |") == 3


def test_the_out_folder_is_a_curve_folder_never_a_runs_or_a_users(tmp_path, monkeypatch):
    from hlgt.storage import claim

    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    run = tmp_path / "runs"
    claim(str(run / "full"), "run")
    (run / "full" / "metrics.jsonl").write_text("a trained run's\n")
    with pytest.raises(ValueError, match=f"{run / 'full'} is a run folder, not a curve folder: give another --out$"):
        main([*TINY, "--ablation", "full", "--out", str(run / "full")])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "full").mkdir()
    with pytest.raises(ValueError, match=f"{mine} holds files and no .hlgt-folder: it is not a curve folder"):
        main([*TINY, "--ablation", "full", "--out", str(mine)])
    assert (run / "full" / "metrics.jsonl").read_text() == "a trained run's\n" and not any((mine / "full").iterdir())
    # A curve folder holding a run a training made in it (an arm's name): that arm is refused.
    ours = tmp_path / "ours"
    claim(str(ours), "curve")
    claim(str(ours / "full"), "run")
    with pytest.raises(ValueError, match=f"{ours / 'full'} is a run folder, not the curve's arm full: give another"):
        main([*TINY, "--ablation", "gts,full", "--out", str(ours), "--epochs", "1"])
    assert not (ours / "gts").exists()  # refused before any arm trained


@pytest.mark.usefixtures("one_thread")
def test_without_out_the_runs_are_trained_in_a_temporary_folder_removed_after(tmp_path, monkeypatch):
    import tempfile

    import jieba

    jieba.initialize()  # its first load writes a cache into the temporary folder: not the command's
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path / "storage"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert main([*TINY, "--ablation", "gts", "--epochs", "1"]) == 0
    assert not any((tmp_path / "tmp").iterdir())


def test_the_arms_train_with_their_shards_held(tmp_path, monkeypatch):
    """Each arm reads the shards as it starts, perhaps hours after the first: a build that would
    replace them meanwhile is refused."""
    import hlgt.commands.curve as command
    from hlgt.data.build import build

    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))
    refused = []

    def train_while_a_rebuild_is_tried(jobs_args, jobs):
        (arm, cfg, shards, *_), = jobs_args.values()
        with pytest.raises(OSError, match="is being read by a running command"):
            build(cfg, out=shards, actors=0, force=True)
        refused.append(shards)
        return {arm: []}

    monkeypatch.setattr(command, "train_arms", train_while_a_rebuild_is_tried)
    monkeypatch.setattr(command, "curve_table", lambda histories: "")
    monkeypatch.setattr(command, "curves_side_by_side", lambda histories: "")
    assert main([*TINY, "--ablation", "gts", "--epochs", "1"]) == 0
    assert [Path(s).name for s in refused] == ["sample-offline"]


def test_arms_are_checked_before_any_work():
    assert parse_arms("gts, full+train.grad_clip=5") == ["gts", "full+train.grad_clip=5"]
    assert parse_arms("all") == list(C.ABLATIONS)
    with pytest.raises(ValueError, match="unknown ablation arm"):
        parse_arms("gts,nope")
    with pytest.raises(ValueError, match="twice"):
        parse_arms("gts,gts")
    with pytest.raises(ValueError, match="unknown config keys"):
        main([*TINY, "--ablation", "full+model.nope=1"])
    with pytest.raises(ValueError, match="unknown ablation arm 'foo'"):
        main([*TINY, "--ablation", "foo"])


@pytest.mark.parametrize("option, value, message", [
    ("--epochs", "0", "must be >= 1, got 0"),
    ("--limit", "-5", "must be >= 1, got -5"),
    ("--threads", "-1", "must be >= 0, got -1"),
    ("--jobs", "-1", "must be >= 0, got -1"),
    ("--device", "foo", "not a torch device"),
])
def test_a_bad_number_or_device_is_refused_naming_its_option(capsys, option, value, message):
    with pytest.raises(SystemExit) as stop:
        main([*TINY, option, value])
    assert stop.value.code == 2 and f"argument {option}: {message}" in capsys.readouterr().err


def test_set_may_not_name_a_key_a_flag_of_the_command_sets():
    with pytest.raises(ValueError, match="--set train.epochs=... and --epochs both set train.epochs"):
        main([*TINY, "--epochs", "1", "--set", "train.epochs=3"])
    with pytest.raises(ValueError, match=r"--ablation \.\.\.\+data.fold=... and --fold both set data.fold"):
        main([*TINY, "--ablation", "gts,full+data.fold=1"])


def test_progress_shows_epochs_and_how_their_batches_ran(capsys):
    from hlgt.train.curve import progress

    for message in ("epoch 2/3 | loss 1.0", "cuda graphs: 30 batches replayed, 1 eager", "resuming from x"):
        progress("full", message)
    assert capsys.readouterr().out.splitlines() == ["[full] epoch 2/3 | loss 1.0",
                                                    "[full] cuda graphs: 30 batches replayed, 1 eager"]


def test_an_epoch_that_did_not_validate_shows_no_validation_figure():
    from hlgt.train.curve import curve_table, curves_side_by_side

    def epoch(e, validated, acc):
        m = {M.EPOCH: e, M.VAL_VALUE_ACC: acc, M.VAL_EQUATION_ACC: acc, M.TRAIN_TREE_LOSS: 1.0 / e,
             M.TRAIN_COM_LOSS: 0.1, M.TRAIN_GRAD_NORM_MAX: 1.0}
        return {**m, M.VAL_TREE_LOSS: 0.5} if validated else m

    # --set train.eval_every=2: epoch 2 carries epoch 1's 40%; a run without validation carries 0.
    histories = {"full": [epoch(1, True, 0.4), epoch(2, False, 0.4)], "gts": [epoch(1, False, 0.0)]}
    side = curves_side_by_side(histories)
    assert "| 1 | 40.0 | – |" in side and "| 2 | – | – |" in side
    assert "| 2 | full | – | – |" in curve_table(histories)

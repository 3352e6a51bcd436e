"""W&B tracking: mode resolution, the no-op tracker, and an offline run holding the metrics."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hlgt.metrics import TRAIN_LOSS, VAL_VALUE_ACC
from hlgt.train import tracking
from hlgt.train.evaluate import score

FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return monkeypatch


def test_mode_resolution(clean_env):
    assert tracking.resolve_mode(False) == "disabled"
    assert tracking.resolve_mode(True) == "offline"
    clean_env.setenv("WANDB_API_KEY", FAKE_KEY)
    assert tracking.resolve_mode(True) == "online"
    clean_env.setenv("WANDB_MODE", "offline")
    assert tracking.resolve_mode(True) == "offline"
    assert tracking.resolve_mode(False) == "disabled"
    clean_env.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(ValueError, match="WANDB_MODE"):
        tracking.resolve_mode(True)


def test_disabled_and_non_zero_ranks_do_nothing(clean_env, tmp_path):
    for kwargs in ({"enabled": False, "rank": 0}, {"enabled": True, "rank": 1}):
        t = tracking.start({"a": 1}, project="p", name="n", group=None, directory=tmp_path, **kwargs)
        assert not t.enabled
        t.log({"x": 1.0}, step=1)
        t.log_table("t", ["a"], [[1]])
        t.finish()
    assert not (tmp_path / "wandb").exists()


def test_run_ids_are_stable_and_safe():
    assert tracking.run_id("sweep/full-s0-r0 trial:1") == tracking.run_id("sweep/full-s0-r0 trial:1")
    assert tracking.run_id("sweep/full-s0-r0 trial:1") == "sweep-full-s0-r0-trial-1"
    assert tracking.run_id("sweep/full-s0-r0 trial:1", "1f2e3d4c") == "sweep-full-s0-r0-trial-1-1f2e3d4c"
    long = "g" * 115 + "/trial"  # a run from before start ids resumes into its W&B run: cut at 120, as then
    assert tracking.run_id(long) == ("g" * 115 + "-trial")[:120] and len(tracking.run_id(long, "1f2e3d4c")) == 119


def test_offline_run_holds_config_metrics_and_predictions_but_never_the_key(clean_env, tmp_path):
    clean_env.setenv("WANDB_API_KEY", FAKE_KEY)  # present, but WANDB_MODE says offline
    clean_env.setenv("WANDB_MODE", "offline")
    t = tracking.start({"model.heads": 4, "train.lr": 1e-3}, enabled=True, project="hlgt-test", name="full-t1",
                       group="sweep-x", directory=tmp_path)
    assert t.enabled
    for epoch in (1, 2):
        t.log({TRAIN_LOSS: 1.0 / epoch, VAL_VALUE_ACC: 0.25 * epoch}, step=epoch)
    row = {"id": "7", "text": "t", "num_values": [2.0, 3.0], "num_texts": ["2", "3"], "prefix": ["+", "N0", "N1"],
           "answer": 5.0}
    t.log_predictions("predictions/test", [score(row, ["+", "N0", "N1"])])
    t.summary({"test/value_acc": 1.0})
    t.finish()

    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # W&B's service process writes the run file; when an earlier test of the session started that
    # service, finish() can return before the last records are on disk: wait for them (10 s at most).
    wanted = (b"val/value_acc", b"train/loss", b"model.heads", b"sweep-x", b"full-t1", b"test/value_acc")
    for _ in range(100):
        log = next(runs[0].glob("run-*.wandb")).read_bytes()
        if all(w in log for w in wanted):
            break
        time.sleep(0.1)
    for expected in wanted:
        assert expected in log
    tables = list(runs[0].glob("files/media/table/predictions/*.table.json"))
    assert tables and '"2+3"' in tables[0].read_text()  # the predicted equation, numbers substituted
    for path in Path(tmp_path).rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"



def test_the_last_epoch_logged_is_kept_when_the_run_is_killed(clean_env, tmp_path):
    # A run stopped between two epochs (a session's end, a lost node) never calls finish(): the
    # last epoch logged must reach the run's file all the same. The process is killed once W&B's
    # service has written the first epoch (it writes every few seconds): the second must be there.
    script = (f"import glob, os, signal, time\n"
              f"from hlgt.train import tracking\n"
              f"t = tracking.start({{}}, enabled=True, project='hlgt-test', name='killed', group=None, "
              f"directory={str(tmp_path)!r})\n"
              f"t.log({{{TRAIN_LOSS!r}: 0.987654321}}, step=1)\n"
              f"t.log({{{TRAIN_LOSS!r}: 0.123456789}}, step=2)\n"
              f"for _ in range(600):\n"
              f"    if any(b'0.987654321' in open(p, 'rb').read() for p in glob.glob("
              f"{str(tmp_path / 'wandb' / 'offline-run-*' / 'run-*.wandb')!r})):\n"
              f"        break\n"
              f"    time.sleep(0.1)\n"
              f"os.kill(os.getpid(), signal.SIGKILL)\n")
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}  # a service of its own, as a run has
    env["WANDB_MODE"] = "offline"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    log = b"".join(p.read_bytes() for p in tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert b"0.987654321" in log and b"0.123456789" in log

"""Every command ends a user's mistake with one line naming it (status 2); --debug or
HLGT_DEBUG=1 shows the traceback."""
import os
import subprocess
import sys

import pytest

from hlgt.cli import non_negative_int, positive_int, refuse_flag_keys, run_command


def command(*args, debug=False):
    env = {**os.environ, "HLGT_DEBUG": "1" if debug else ""}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("args, named", [
    (["-m", "hlgt.train", "--dataset", "sample", "--no-ray", "--set", "model.nope=1"], "model.nope"),
    (["-m", "hlgt.train", "--dataset", "sample", "--no-ray", "--set", "model.heads=abc"], "model.heads"),
    (["-m", "hlgt.train", "--dataset", "sample", "--no-ray", "--ablation", "nope"], "unknown ablation arm 'nope'"),
    (["-m", "hlgt.solve", "--model", "no/such/folder", "Tom has 3 apples and 4 more."], "no/such/folder"),
    (["-m", "hlgt.train.evaluate", "--model", "no/such/folder"], "no/such/folder"),
    (["-m", "hlgt.train.compare", "--a", "no/such/run", "--b", "no/such/run"], "no/such/run"),
])
def test_a_mistake_is_one_line_naming_it(args, named):
    out = command(*args)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in out.stderr, out.stderr


def test_debug_shows_the_traceback():
    args = ["-m", "hlgt.train", "--dataset", "sample", "--no-ray", "--set", "model.nope=1"]
    assert "Traceback" in command(*args, debug=True).stderr
    assert "Traceback" in command(*args, "--debug").stderr


def test_run_keeps_bugs_loud_and_strips_debug(capsys, monkeypatch):
    monkeypatch.delenv("HLGT_DEBUG", raising=False)
    seen = []

    def main(argv):
        seen.append(argv)
        raise FileNotFoundError("manifest.json is missing in shards/x")

    assert run_command(main, "prog", ["--a", "1"]) == 2
    assert capsys.readouterr().err.startswith("prog: error: manifest.json is missing in shards/x")
    with pytest.raises(FileNotFoundError):
        run_command(main, "prog", ["--debug"])
    assert seen[-1] == []

    def buggy(argv):
        raise TypeError("a bug")

    with pytest.raises(TypeError):
        run_command(buggy, "prog", [])


def test_ctrl_c_in_any_command_is_one_line_and_status_130(capsys, monkeypatch):
    monkeypatch.delenv("HLGT_DEBUG", raising=False)

    def interrupted(argv):
        raise KeyboardInterrupt

    assert run_command(interrupted, "prog", []) == 130
    assert capsys.readouterr().err == "prog: interrupted\n"


def test_number_types_name_the_bound():
    import argparse

    assert positive_int("3") == 3 and non_negative_int("0") == 0
    for kind, text, message in ((positive_int, "0", "must be >= 1, got 0"), (non_negative_int, "-1", "must be >= 0"),
                                (positive_int, "x", "expects an integer, got 'x'")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            kind(text)


def test_set_may_not_name_a_key_a_flag_sets():
    refuse_flag_keys({"model.heads": 2}, {"train.epochs": "--epochs"})
    with pytest.raises(ValueError, match="--set train.epochs=... and --epochs both set train.epochs"):
        refuse_flag_keys({"train.epochs": 3}, {"train.epochs": "--epochs"})

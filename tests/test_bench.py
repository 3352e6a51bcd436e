"""hlgt.train.bench runs end to end on the sample data (a smoke test of the command: the speed
figures themselves are measurements for BENCHMARKS.md, never asserted)."""
import pytest

from hlgt.train.bench import main


@pytest.mark.usefixtures("one_thread")
def test_bench_prints_both_arms_with_bf16_decoding(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HLGT_STORAGE", str(tmp_path))  # shards built under tmp_path
    assert main(["--dataset", "sample", "--ablation", "full,gts", "--limit", "32", "--decode-limit", "8",
                 "--batch-size", "16", "--embedding", "8", "--hidden", "16", "--beam", "2", "--threads", "1",
                 "--bf16", "--set", "model.heads=2", "--set", "model.layers=1"]) == 0
    out = capsys.readouterr().out
    assert "8 held-out problems decoded (8 training, 0 validation)" in out
    rows = [line for line in out.splitlines() if line.startswith("| full |") or line.startswith("| gts |")]
    assert len(rows) == 2 and all(len(r.split("|")) == 10 for r in rows)
    assert "| 1.00 | 1.00 |" in rows[1]  # gts is the reference of the ratios


def test_bench_rejects_unknown_arms():
    with pytest.raises(SystemExit, match="unknown ablation arm 'nope'"):
        main(["--dataset", "sample", "--arms", "full,nope"])  # --arms: the older name of --ablation

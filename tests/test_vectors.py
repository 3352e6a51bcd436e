"""Skip-gram word vectors trained on a shard folder's training texts."""
import pytest
import torch

from hlgt.commands import vectors as vectors_command
from hlgt.config import Config
from hlgt.data import vectors
from hlgt.data.vocab import Vocab, read_word_vectors


def test_words_in_the_same_contexts_get_close_vectors(one_thread):
    # "apple" and "pear" share every context, "car" shares none of theirs.
    sentences = [["tom", "eats", fruit, "today"] for fruit in ("apple", "pear")] * 200
    sentences += [["ann", "drives", "car", "fast"]] * 200
    vecs = vectors.train_vectors(sentences, dim=16, window=2, epochs=3, sample=1.0, batch=256, lr=0.02,
                                 log=lambda _: None)
    v = {w: torch.tensor(x) for w, x in vecs.items()}
    cos = torch.nn.functional.cosine_similarity
    assert cos(v["apple"], v["pear"], dim=0) > cos(v["apple"], v["car"], dim=0) + 0.3
    everything = torch.stack(list(v.values()))
    assert abs(float(everything.std()) - 1.0) < 1e-3  # the scale of the N(0, 1) rows they replace


def test_rare_and_reserved_words_get_no_vector():
    vecs = vectors.train_vectors([["NUM", "a", "b", "a", "b"]] * 3 + [["once", "a"], ["twice"], ["twice"]], dim=4,
                                 epochs=1, min_count=3, log=lambda _: None)
    assert sorted(vecs) == ["a", "b"]
    with pytest.raises(ValueError, match="no word occurs 3 times"):
        vectors.train_vectors([["a", "NUM"]], min_count=3, log=lambda _: None)


def test_the_command_writes_a_file_the_training_loop_reads(tmp_path, one_thread):
    from hlgt.data.build import ensure_shards
    from hlgt.data.shards import load_vocab

    shards = ensure_shards(Config.from_flat({"data.dataset": "sample", "data.shards_dir": str(tmp_path / "p")}))
    out = tmp_path / "vectors.txt"
    assert vectors_command.main(["--shards", str(shards), "--out", str(out), "--dim", "8", "--epochs", "1"]) == 0
    vocab: Vocab = load_vocab(shards)
    found = read_word_vectors(out, vocab, 8)
    header = out.read_text(encoding="utf-8").split("\n", 1)[0].split()
    assert int(header[1]) == 8 and int(header[0]) == len(found.ids) > 20 and found.malformed == 0
    assert not list(tmp_path.glob("*.partial"))  # no temporary file left


def test_bad_arguments_are_one_line(tmp_path, capsys):
    from hlgt.commands.cli import run_command

    assert run_command(vectors_command.main, "vectors",
                       ["--shards", str(tmp_path / "none"), "--out", str(tmp_path / "v")]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        vectors_command.main(["--shards", str(tmp_path), "--out", "v", "--dim", "0"])
    assert "--dim must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        vectors_command.main(["--shards", str(tmp_path), "--out", "v", "--seed", str(10 ** 23)])
    assert "--seed must be in [0, 2**63)" in capsys.readouterr().err

"""Fixtures and markers shared by several test modules."""
import pytest
import torch

from hlgt.data.splits import resolve_data_dir


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread, and CI's 2 cores may be busy with Ray processes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A model folder (``<run>/best``) trained briefly on the sample data, shared by the tests of
    the commands that read one (solve, evaluate)."""
    # Imported here: every test session loads this file, most of them never train.
    from hlgt.config import Config
    from hlgt.data.build import ensure_shards
    from hlgt.train import loop

    cfg = Config.from_flat({"data.dataset": "sample", "train.epochs": 2, "train.lr_step": 1, "train.batch_size": 16,
                            "model.embedding_size": 8, "model.hidden_size": 16, "model.heads": 2, "model.layers": 1,
                            "model.beam_size": 2, "model.max_output_len": 16, "train.wandb": False,
                            "train.threads": 1, "data.shards_dir": str(tmp_path_factory.mktemp("processed"))})
    run = tmp_path_factory.mktemp("run")
    loop.train(cfg, ensure_shards(cfg), run_dir=run)
    return run / "best"


@pytest.fixture(scope="session")
def real_data():
    """The real benchmark files (``$HLGT_DATA_DIR`` or ../shared/datasets); tests that read them
    carry ``@pytest.mark.realdata`` and are skipped when the folder is absent."""
    return resolve_data_dir(None)


def pytest_collection_modifyitems(config, items):
    real = resolve_data_dir(None)
    if real.is_dir():
        return
    skip = pytest.mark.skip(reason=f"real datasets not found at {real}")
    for item in items:
        if "realdata" in item.keywords:
            item.add_marker(skip)

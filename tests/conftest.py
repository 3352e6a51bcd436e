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

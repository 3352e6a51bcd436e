"""Fixtures shared by several test modules."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread, and CI's 2 cores may be busy with Ray processes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

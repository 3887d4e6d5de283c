"""Training tests run on a shared 2-core machine (CI: two pytest workers): one intra-op thread per test module,
set before the module's own fixtures (the digits run) and restored afterwards."""
import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

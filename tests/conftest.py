"""Shared test settings."""

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> Iterator[None]:
    """Tests use tiny tensors: one intra-op thread is faster than two on a shared 2-core machine
    and immune to CPU oversubscription."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# the script that made tests/data/store_format2 ran against the previous code; it is not a test
collect_ignore = ["data/make_store_format2.py"]

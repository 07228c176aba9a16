"""Shared test settings."""

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _own_trust_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The record of files this user wrote (orbitscope.trust) lives in a temporary folder."""
    import os

    old = os.environ.get("ORBITSCOPE_CONFIG")
    os.environ["ORBITSCOPE_CONFIG"] = str(tmp_path_factory.mktemp("orbitscope-config"))
    yield
    if old is None:
        os.environ.pop("ORBITSCOPE_CONFIG", None)
    else:
        os.environ["ORBITSCOPE_CONFIG"] = old


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

"""Shared test settings: the same outcome whatever the machine, its load, its core count and the
order in which tests run (pytest-xdist hands tests to workers as they free up)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch

# Torch intra-op threads for the tests and for every process they start. One by default: tests use
# tiny tensors, one thread is faster than two on a shared 2-core machine and immune to CPU
# oversubscription. ORBITSCOPE_TEST_THREADS=N runs the suite at N threads (the portability check
# runs it at 2); a test that compares a subprocess's floats with its own bit for bit holds at any N
# because the subprocess inherits N through OMP_NUM_THREADS / MKL_NUM_THREADS.
TEST_THREADS = int(os.environ.get("ORBITSCOPE_TEST_THREADS", "1"))


@pytest.fixture(autouse=True, scope="session")
def _own_trust_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The record of files this user wrote (orbitscope.trust) lives in a temporary folder."""
    old = os.environ.get("ORBITSCOPE_CONFIG")
    os.environ["ORBITSCOPE_CONFIG"] = str(tmp_path_factory.mktemp("orbitscope-config"))
    yield
    if old is None:
        os.environ.pop("ORBITSCOPE_CONFIG", None)
    else:
        os.environ["ORBITSCOPE_CONFIG"] = old


@pytest.fixture(autouse=True, scope="session")
def _fixed_torch_threads() -> Iterator[None]:
    """TEST_THREADS intra-op threads here and in every subprocess a test starts; deterministic
    algorithms where torch has a choice (a warning, not an error, where an op has none)."""
    old_env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(TEST_THREADS)
    torch.set_num_threads(TEST_THREADS)
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.set_num_threads(old_threads)
    torch.use_deterministic_algorithms(old_det)
    for k, v in old_env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _seed() -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)


@pytest.fixture(autouse=True, scope="module")
def _seeded_module() -> None:
    """A module's own fixtures (built once, before its first test) start from the same global
    random state whichever modules ran before it in its worker."""
    _seed()


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test starts from the same global random state (torch, numpy, random), whichever tests
    ran before it: a model built without an explicit seed is the same model on every run and under
    every distribution of tests over workers."""
    _seed()


# the script that made tests/data/store_format2 ran against the previous code; it is not a test
collect_ignore = ["data/make_store_format2.py"]

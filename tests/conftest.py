"""Shared test settings: the same outcome whatever the machine, its load, its core count and the
order in which tests run (pytest-xdist hands tests to workers as they free up)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

# Intra-op threads (torch, OpenBLAS, MKL, OpenMP) for the tests and for every process they start.
# One by default: tests use tiny arrays, one thread is faster than two on a shared 2-core machine
# and immune to CPU oversubscription (OpenBLAS's spinning threads made simulation tests 3x slower
# under load). ORBITSCOPE_TEST_THREADS=N runs the suite at N threads (the portability check runs it
# at 2); a test that compares a subprocess's floats with its own bit for bit holds at any N because
# the subprocess inherits N through these variables. Set before numpy and torch are imported here;
# threadpoolctl (below) also limits pools that a plugin's earlier import of numpy started.
TEST_THREADS = int(os.environ.get("ORBITSCOPE_TEST_THREADS", "1"))
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
for _name in THREAD_VARIABLES:
    os.environ[_name] = str(TEST_THREADS)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402


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
    """TEST_THREADS intra-op threads here (torch and the BLAS/OpenMP pools) and in every subprocess
    a test starts (the variables set above); deterministic algorithms where torch has a choice (a
    warning, not an error, where an op has none)."""
    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(TEST_THREADS)
    torch.use_deterministic_algorithms(True, warn_only=True)
    with threadpool_limits(TEST_THREADS):
        yield
    torch.set_num_threads(old_threads)
    torch.use_deterministic_algorithms(old_det)


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

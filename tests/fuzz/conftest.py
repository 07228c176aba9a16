"""Fixtures of the fuzz suite (machinery in ``fuzzing.py``): one capped worker per test session."""

from __future__ import annotations

from typing import Iterator

import pytest

from fuzzing import Worker


@pytest.fixture(scope="session")
def fuzz_worker() -> Iterator[Worker]:
    worker = Worker()
    yield worker
    worker.stop()

"""The pytest plugin of orbitscope (entry point ``pytest11: orbitscope``): the ``orbit_check``
fixture and ``--orbitscope-junit PATH``.

It is a package of its own so that loading it, which pytest does in every session of every
project where orbitscope is installed, costs nothing: it imports only the standard library and
pytest, and :mod:`orbitscope.testing` (with torch) only when a test asks for ``orbit_check``.
See :mod:`orbitscope.testing` for the checks themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from orbitscope.testing import OrbitCheck

__all__ = ["orbit_check", "pytest_addoption", "pytest_configure", "pytest_sessionfinish"]

#: (test id, report) of every check of the session, for --orbitscope-junit
SESSION_REPORTS = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--orbitscope-junit PATH``."""
    parser.getgroup("orbitscope").addoption(
        "--orbitscope-junit", metavar="PATH", default=None,
        help="write the report of every orbit_check check of the session as JUnit XML to PATH (a test suite per "
             "test, a test case per check)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SESSION_REPORTS] = []


@pytest.fixture
def orbit_check(request: pytest.FixtureRequest, tmp_path: Path) -> "OrbitCheck":
    """Invariance and regression checks bound to a store in the test's temporary folder:
    ``orbit_check.invariant(model, data, orbit, max_drop=0.05)``,
    ``orbit_check.no_regression(model, baseline, data, orbit)`` (see
    :class:`orbitscope.testing.OrbitCheck`)."""
    from orbitscope.testing import OrbitCheck

    sink: list[Any] = request.config.stash.get(SESSION_REPORTS, [])
    node = request.node.nodeid
    return OrbitCheck(tmp_path / "orbitscope-runs", on_report=lambda report: sink.append((node, report)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("orbitscope_junit", None)
    if path:
        from orbitscope.testing import merge_junit

        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(merge_junit(session.config.stash.get(SESSION_REPORTS, [])), encoding="utf-8")

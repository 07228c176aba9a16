"""Every import the README shows works; the old top-level shim modules are gone (issue 36, point 6)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _import_lines() -> list[str]:
    lines = []
    for block in _python_blocks():
        for line in block.splitlines():
            if re.match(r"^(from orbitscope[\w.]* import |import orbitscope)", line.strip()):
                lines.append(line.strip().split("#")[0].strip())
    return lines


def test_readme_has_python_imports():
    assert len(_import_lines()) >= 10


@pytest.mark.parametrize("line", _import_lines())
def test_every_readme_import_works(line):
    exec(line, {})  # noqa: S102 - the README's own lines


_REMOVED = ["actions", "plot", "nero", "interactive", "reduce", "ranking", "report", "loading"]


@pytest.mark.parametrize("name", _REMOVED)
def test_old_top_level_shims_are_gone(name):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"orbitscope.{name}")


@pytest.mark.parametrize("name", _REMOVED)
def test_readme_imports_no_removed_module(name):
    assert not any(re.match(rf"from orbitscope\.{name} import ", line) for line in _import_lines())
    assert f"`orbitscope.{name}." not in README.read_text()


@pytest.mark.parametrize("new, name", [
    ("orbitscope.kinds", "warp_images"),
    ("orbitscope.viz.plot", "nero_plot"),
    ("orbitscope.analysis.nero", "prepare_aggregate"),
    ("orbitscope.viz.interactive", "render_plotly"),
    ("orbitscope.analysis.reduce", "embed"),
    ("orbitscope.analysis.ranking", "rank_samples"),
    ("orbitscope.viz.report", "write_report"),
    ("orbitscope.models.loading", "load_user_model"),
])
def test_real_homes_export_the_names(new, name):
    assert callable(getattr(importlib.import_module(new), name))

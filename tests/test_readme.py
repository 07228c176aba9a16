"""Every import the README shows works, and the old module paths are the same objects as the new."""

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


@pytest.mark.parametrize("old, new, name", [
    ("orbitscope.actions", "orbitscope.kinds", "warp_images"),
    ("orbitscope.plot", "orbitscope.viz.plot", "nero_plot"),
    ("orbitscope.nero", "orbitscope.analysis.nero", "prepare_aggregate"),
    ("orbitscope.interactive", "orbitscope.viz.interactive", "render_plotly"),
    ("orbitscope.reduce", "orbitscope.analysis.reduce", "embed"),
    ("orbitscope.ranking", "orbitscope.analysis.ranking", "rank_samples"),
    ("orbitscope.report", "orbitscope.viz.report", "write_report"),
    ("orbitscope.loading", "orbitscope.models.loading", "load_user_model"),
])
def test_old_module_paths_reexport_the_same_objects(old, new, name):
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)

"""The documentation site (docs/, mkdocs.yml): the strict build, the code on its pages, and the
references generated from the code (docs/hooks.py).

* ``test_site_builds_strict``: ``mkdocs build --strict`` into a temporary folder, no warning.
* ``test_page_python_blocks_run[<page>]``: every ```` ```python ```` block of the page runs, in order,
  in one namespace, in a fresh interpreter whose working directory is a new temporary folder, within
  ``ORBITSCOPE_DOCS_PAGE_TIMEOUT`` seconds (default 300) per page. A block preceded by the line
  ``<!-- not-run: REASON -->`` is skipped (the reason must be given). Pages are found when the tests
  are collected: a new page needs no change here.
* The CLI reference names every command and option of the Typer app, the orbit-spec reference every
  registered orbit kind and every name of the parser, the API reference every public name; all
  checked against the app, registry and packages introspected here, not through the hook's code.
"""

from __future__ import annotations

import html
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE_TIMEOUT = float(os.environ.get("ORBITSCOPE_DOCS_PAGE_TIMEOUT", "300"))
BUILD_TIMEOUT = 900

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*\{?\.?(?P<lang>[\w+-]*)(?P<rest>[^\n]*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run\b\s*(?P<colon>:?)(?P<reason>.*?)-->\s*$")
PYTHON_LANGS = {"python", "py", "python3"}


@dataclass
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip_reason: str | None  # the not-run marker's reason ("" when the marker has none)


def page_paths() -> list[str]:
    """Every Markdown page under docs/, as a path relative to docs/ (sorted)."""
    return sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def code_blocks(text: str, page: str = "") -> list[Block]:
    """The fenced code blocks of a Markdown page (also indented ones, in lists, admonitions and
    tabs: their indentation is removed), with the not-run marker on the nearest non-blank line
    before each."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group("indent"), m.group("fence")
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = _NOT_RUN.match(lines[k]) if k >= 0 else None
        reason = None
        if marker:
            reason = marker.group("reason").strip() if marker.group("colon") else ""
        blocks.append(Block(page, i + 1, m.group("lang").lower(), "\n".join(body) + "\n", reason))
        i = j + 1
    return blocks


def python_blocks(page: str) -> list[Block]:
    return [b for b in code_blocks((DOCS / page).read_text(encoding="utf-8"), page) if b.lang in PYTHON_LANGS]


PAGES = page_paths()
PAGES_WITH_PYTHON = [p for p in PAGES if python_blocks(p)]


# ---------------------------------------------------------------------------------------------
# The parser of pages (fast)
# ---------------------------------------------------------------------------------------------


def test_code_blocks_parser() -> None:
    page = textwrap.dedent("""\
        Text.

        ```python
        a = 1
        ```

        <!-- not-run: needs a GPU -->
        ```python
        raise SystemExit
        ```

        !!! example
            ```python title="indented"
            b = a + 1
            ```

        <!-- not-run: -->

        ~~~py
        c = 3
        ~~~

        ```bash
        make docs
        ```
        """)
    blocks = code_blocks(page)
    assert [(b.lang, b.code, b.skip_reason) for b in blocks] == [
        ("python", "a = 1\n", None), ("python", "raise SystemExit\n", "needs a GPU"),
        ("python", "b = a + 1\n", None), ("py", "c = 3\n", ""), ("bash", "make docs\n", None)]


def test_not_run_markers_give_a_reason() -> None:
    missing = [f"{b.page}:{b.line}" for p in PAGES for b in python_blocks(p) if b.skip_reason == ""]
    assert not missing, f"<!-- not-run: REASON --> needs a reason before the blocks at {missing}"


# ---------------------------------------------------------------------------------------------
# Every ```python block of every page runs
# ---------------------------------------------------------------------------------------------

RUNNER = textwrap.dedent("""\
    import json, sys, traceback
    blocks = json.load(open(sys.argv[1], encoding="utf-8"))
    namespace = {"__name__": "__main__"}
    for block in blocks:
        print(f"@@block {block['line']}", file=sys.stderr, flush=True)
        try:
            exec(compile(block["code"], f"{block['page']}:{block['line']}", "exec"), namespace)
        except BaseException:
            print(f"@@failed {block['line']}", file=sys.stderr, flush=True)
            traceback.print_exc()
            sys.exit(1)
    print("@@done", file=sys.stderr, flush=True)
    """)


def _last_block(stderr: str) -> str:
    started = re.findall(r"^@@block (\d+)$", stderr, flags=re.M)
    return started[-1] if started else "?"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_PYTHON or [pytest.param("(none)", marks=pytest.mark.skip(
    reason="no page has a python block"))])
def test_page_python_blocks_run(page: str, tmp_path: Path) -> None:
    blocks = python_blocks(page)
    unexplained = [b.line for b in blocks if b.skip_reason == ""]
    assert not unexplained, f"{page}: <!-- not-run: REASON --> without a reason before the blocks at lines {unexplained}"
    runnable = [b for b in blocks if b.skip_reason is None]
    if not runnable:
        pytest.skip(f"{page}: every python block is marked not-run")
    work = tmp_path / "cwd"
    work.mkdir()
    (tmp_path / "blocks.json").write_text(json.dumps([b.__dict__ for b in runnable]), encoding="utf-8")
    (tmp_path / "runner.py").write_text(RUNNER, encoding="utf-8")
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")],
                              cwd=work, env=env, capture_output=True, text=True, timeout=PAGE_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        pytest.fail(f"{page}: the python blocks took longer than {PAGE_TIMEOUT:.0f} s (the block at line "
                    f"{_last_block(err)} was running)\n{err[-3000:]}")
    if proc.returncode != 0:
        pytest.fail(f"{page}: the python block at line {_last_block(proc.stderr)} failed\n"
                    f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")


# ---------------------------------------------------------------------------------------------
# The strict build, and what the generated references contain
# ---------------------------------------------------------------------------------------------


def build_site(dest: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(dest)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    dest = tmp_path_factory.mktemp("site")
    return dest, build_site(dest)


@pytest.mark.slow
def test_site_builds_strict(site: tuple[Path, subprocess.CompletedProcess]) -> None:
    dest, proc = site
    log = proc.stdout + proc.stderr
    warnings = [ln for ln in log.splitlines() if re.match(r"^\s*(WARNING|ERROR)\b", ln)]
    assert proc.returncode == 0 and not warnings, f"mkdocs build --strict failed:\n{log[-8000:]}"
    assert (dest / "index.html").exists()


def _page_html(site: tuple[Path, subprocess.CompletedProcess], page: str) -> str:
    dest, proc = site
    path = dest / page / "index.html"
    if not path.exists():
        pytest.fail(f"the build wrote no {page}/index.html:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return path.read_text(encoding="utf-8")


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def _sections(page_html: str) -> dict[str, str]:
    """Heading id -> the HTML from that heading to the next heading."""
    parts = re.split(r'(<h[1-6][^>]*\bid="[^"]+"[^>]*>)', page_html)
    out = {}
    for head, body in zip(parts[1::2], parts[2::2]):
        out[re.search(r'\bid="([^"]+)"', head).group(1)] = head + body
    return out


def _commands() -> list[tuple[str, Any]]:
    """``(command path, click command)`` of the Typer app and every subcommand (not hidden)."""
    import typer

    from orbitscope.cli import app

    found = []

    def walk(cmd: Any, path: str) -> None:
        found.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            if not getattr(sub, "hidden", False):
                walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "orbitscope")
    return found


@pytest.mark.slow
def test_cli_reference_names_every_command_and_option(site: tuple[Path, subprocess.CompletedProcess]) -> None:
    page = _page_html(site, "reference/cli")
    sections = _sections(page)
    commands = _commands()
    assert len(commands) > 10
    missing = []
    for path, cmd in commands[1:]:
        anchor = path.replace(" ", "-")
        if anchor not in sections:
            missing.append(f"command {path!r} (no heading #{anchor})")
            continue
        text = _text(sections[anchor])
        assert path in text
        for param in cmd.params:
            if getattr(param, "hidden", False):
                continue
            names = param.opts if param.param_type_name == "option" else [(param.metavar or param.name).upper()]
            for name in names:
                if name not in text:
                    missing.append(f"{path}: {name}")
            squeezed = re.sub(r"[\s`]", "", param.help or "")[:40]  # `code` in help renders as <code>
            if param.param_type_name == "option" and squeezed not in re.sub(r"\s", "", text):
                missing.append(f"{path}: help of {param.opts[0]}")
    assert not missing, f"the CLI reference lacks: {missing}"


def _parser_names() -> set[str]:
    """Spec names from the parser's help text and range table (read here, not by the hook)."""
    from orbitscope.group import parse

    names = set(parse._RANGE_NAMES)
    names |= {m.split(":")[0] for m in re.findall(r"'([a-z0-9][a-z0-9:-]*)'", parse._SPEC_HELP)}
    return {n for n in names if n}


@pytest.mark.slow
def test_orbit_reference_names_every_kind_and_spec(site: tuple[Path, subprocess.CompletedProcess]) -> None:
    from orbitscope import list_orbits
    from orbitscope.group import parse

    text = _text(_page_html(site, "reference/orbits"))
    codes = set(re.findall(r"<code>([^<]+)</code>", _page_html(site, "reference/orbits")))
    kinds = list_orbits()
    assert len(kinds) >= 10
    assert not [k for k in kinds if k not in codes], "registered orbit kinds missing from the orbit reference"
    names = _parser_names()
    assert {"rotation", "d4", "so3", "octahedral"} <= names
    assert not [n for n in names if not any(c == n or c.startswith(n + ":") for c in codes)], \
        "parser spec names missing from the orbit reference"
    for example in ("rotation:0:360:5", "so3:nero"):
        assert example in codes
        parse.parse_orbit(example)
    assert "does not parse" not in text


def _api_targets() -> list[str]:
    return re.findall(r"^::: *([\w.]+) *$", (DOCS / "reference" / "api.md").read_text(encoding="utf-8"), flags=re.M)


@pytest.mark.slow
def test_api_reference_documents_every_public_name(site: tuple[Path, subprocess.CompletedProcess]) -> None:
    import orbitscope

    page = _page_html(site, "reference/api")
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    links = set(re.findall(r'href="#([^"]+)"', page))
    missing = [n for n in orbitscope.__all__ if f"orbitscope.{n}" not in ids]
    assert not missing, f"names of orbitscope.__all__ without an entry on the API page: {missing}"
    for target in _api_targets():
        try:
            module = importlib.import_module(target)
        except ImportError:
            assert target in ids, f"{target} is not on the API page"
            continue
        absent = [n for n in getattr(module, "__all__", [])
                  if f"{target}.{n}" not in ids and not any(a.endswith("." + n) and a in ids for a in links)]
        assert not absent, f"{target}.__all__ names neither documented nor linked on the API page: {absent}"
    assert "orbitscope.evaluate" in ids and "orbitscope.Store" in ids
    # signatures with types, and Sphinx roles rendered (not shown as ":class:`...`")
    assert 'class="doc-signature' in page or "doc-signature" in page
    assert ":class:" not in _text(page) and ":func:" not in _text(page)

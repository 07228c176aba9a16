"""Issue 38, sweep files: hostile or malformed sweep files cost one line, never gigabytes.

Defect 1 (a 543-byte YAML "billion laughs"), defect 2 (a 1 × 1000 × 1000 × 1000 sweep), defect 7
(``--dry-run``) and defect 10 (wrong types found only when a run starts) run ``orbitscope sweep``
in a subprocess under a memory cap and a time cap; the bounds themselves (the run limit, the
file's size, values and depth), the bounded repr of user values and the warning of the ``--name``
minor are checked in process."""

from __future__ import annotations

import logging
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import orbitscope as osc
from orbitscope.data.specs import parse_data_spec
from orbitscope.engine import sweep_file
from orbitscope.engine.sweep_file import MAX_SWEEP_RUNS, MAX_SWEEP_RUNS_ENV, load_sweep, read_sweep_file
from orbitscope.errors import SpecError
from orbitscope.models.loading import save_model
from orbitscope.models.registry import build_model
from orbitscope.safe_repr import SHORT_REPR_DEPTH, short_repr, short_text

from helpers import finish_capped_cli, run_capped_cli, start_capped_cli

SMALL = {"arch": "small_cnn", "in_channels": 1, "num_classes": 10, "widths": [8, 16, 32], "hidden": 64}

TIMEOUT_S = 60


def run_capped(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``orbitscope ARGS`` under the memory cap of :func:`helpers.run_capped_cli`, failed after TIMEOUT_S."""
    return run_capped_cli(args, cwd, timeout_s=TIMEOUT_S)


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit status 2, stderr exactly one line ``error: …`` holding every needle, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert "[bold" not in lines[0] and "[/]" not in lines[0], lines[0]  # no literal markup
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder with two small model files, a.safetensors and b.safetensors."""
    for seed, name in ((0, "a"), (1, "b")):
        torch.manual_seed(seed)
        save_model(build_model(SMALL), tmp_path / f"{name}.safetensors")
    return tmp_path


# ----------------------------------------------------------------------------------- defect 1


def laughs_yaml() -> str:
    """The "billion laughs": ten anchors, each a list of nine aliases of the one before, under a
    free table (executor_options), then ``data: *a9`` (9^9 lists of nine "lol" as data specs)."""
    lines = ["models: [{name: a, path: a.safetensors}]", "orbits: [flip]", "executor_options:",
             "  a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"  a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 9) + "]" for k in range(1, 10)]
    return "\n".join(lines + ["data: *a9", ""])


def test_the_laughs_file_is_the_issues(tmp_path: Path) -> None:
    text = laughs_yaml()
    assert len(text.encode()) < 650
    import yaml

    data = yaml.safe_load(text)["data"]
    size, level = 1, data
    while isinstance(level, list):  # nine of nine of … : 9**10 "lol" once expanded
        size, level = size * len(level), level[0]
    assert size == 9**10 and level == "lol"


def test_a_billion_laughs_sweep_is_refused_in_one_line_under_a_memory_cap(folder: Path) -> None:
    (folder / "laughs.yaml").write_text(laughs_yaml())
    proc = run_capped(["sweep", "laughs.yaml", "--dry-run"], cwd=folder)
    line = one_line_error(proc, "laughs.yaml", "aliases")
    assert f"{sweep_file.MAX_SWEEP_VALUES:,}" in line
    assert len(line) < 600


def test_short_repr_is_bounded_on_the_laughs() -> None:
    laughs: list = ["lol"] * 9
    for _ in range(9):
        laughs = [laughs] * 9
    text = short_repr(laughs)
    assert len(text) <= 201 and text.startswith("[[[[") and text.endswith("…")
    assert short_repr(laughs, limit=20) == "[[[[[[[…], […], […],…"  # 20 characters, then …


@pytest.mark.parametrize("value", [None, True, 3, -2.5, "plain", "it's", b"\x00ab", [1, "x", None], (1,), (),
                                   {"a": [1, 2], "b": {"c": (3, 4)}}, {1, 2}, frozenset({3}), [[], {}], float("nan"),
                                   np.int64(3), [np.float32(2.5)], np.array(7)])
def test_short_repr_of_small_values_is_their_repr(value: object) -> None:
    assert short_repr(value) == repr(value)  # the reference: Python's own repr


def test_short_repr_bounds_what_repr_cannot() -> None:
    big = "x" * 10_000_000
    assert short_repr(big) == repr(big[:200])[:-1][:200] + "…"
    assert short_repr(10**5000) == "<an integer of 16610 bits>"  # repr() itself raises (4300 digits)
    loop: list = []
    loop.append(loop)
    assert short_repr(loop) == repr(loop) == "[[...]]"
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert short_repr(deep) == "[" * SHORT_REPR_DEPTH + "[…]" + "]" * SHORT_REPR_DEPTH

    class Costly:
        def __repr__(self) -> str:  # pragma: no cover - must not be called
            raise AssertionError("short_repr called an object's own __repr__")

    assert short_repr([Costly()]) == "[<Costly>]"
    assert short_repr(torch.zeros(3, 4)) == "<Tensor of shape (3, 4) and dtype torch.float32>"
    assert short_repr(np.array(Costly(), dtype=object)) == "<ndarray of shape () and dtype object>"
    assert short_text("a\nb" * 1000, 10) == "a ba ba ba…"


# ----------------------------------------------------------------------------------- defect 2


def billion_runs_toml() -> str:
    data = ", ".join(f'"mnist-subset:test@{k}"' for k in range(1, 1001))
    orbits = ", ".join(f'"rotation:0:{k}:1"' for k in range(1, 1001))
    tasks = ", ".join(['"classification"'] * 1000)
    return f"data = [{data}]\norbits = [{orbits}]\ntasks = [{tasks}]\n[[models]]\nname = \"a\"\npath = \"a.safetensors\"\n"


def test_a_billion_run_sweep_is_counted_before_it_is_built(folder: Path) -> None:
    (folder / "big.toml").write_text(billion_runs_toml())
    assert 55_000 < (folder / "big.toml").stat().st_size < 70_000
    proc = run_capped(["sweep", "big.toml", "--dry-run"], cwd=folder)
    one_line_error(proc, "big.toml", "1 model × 1,000 data × 1,000 orbits × 1,000 tasks = 1,000,000,000 runs",
                   f"limit of {MAX_SWEEP_RUNS:,}", "--max-runs 1000000000", MAX_SWEEP_RUNS_ENV)


def test_the_run_limit_is_raised_by_argument_or_environment(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "s.toml").write_text('data = ["mnist-subset:test@4", "mnist-subset:test@6"]\n'
                                   'orbits = ["flip", "rotation:0:180:90"]\n[[models]]\nname = "a"\npath = "a.safetensors"\n')
    with pytest.raises(SpecError, match=r"1 model × 2 data × 2 orbits × 1 task = 4 runs, over the limit of 3 runs"):
        load_sweep(folder / "s.toml", max_runs=3)
    assert len(load_sweep(folder / "s.toml", max_runs=4).runs) == 4
    monkeypatch.setenv(MAX_SWEEP_RUNS_ENV, "3")
    with pytest.raises(SpecError, match="over the limit of 3 runs"):
        load_sweep(folder / "s.toml")
    assert len(load_sweep(folder / "s.toml", max_runs=4).runs) == 4  # the argument wins
    monkeypatch.setenv(MAX_SWEEP_RUNS_ENV, "many")
    with pytest.raises(SpecError, match=f"{MAX_SWEEP_RUNS_ENV}='many' is not a positive integer"):
        load_sweep(folder / "s.toml")
    monkeypatch.delenv(MAX_SWEEP_RUNS_ENV)
    runs = "\n".join('[[runs]]\nmodel = "a"\ndata = "mnist-subset:test@4"\norbit = "flip"' for _ in range(3))
    (folder / "r.toml").write_text(f'[[models]]\nname = "a"\npath = "a.safetensors"\n{runs}\n')
    with pytest.raises(SpecError, match=r"3 \[\[runs\]\] entries, over the limit of 2 runs"):
        load_sweep(folder / "r.toml", max_runs=2)


def test_the_runs_of_a_sweep_are_made_lazily_in_the_order_of_a_plain_loop(folder: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    models, data = ["a", "b"], ["mnist-subset:test@4", "mnist-subset:test@6"]
    orbits, tasks = ["flip", "rotation:0:180:90", "shift:-2:2:2"], ["classification", "classification,probabilities=True"]
    (folder / "s.toml").write_text(textwrap.dedent(f"""
        data = {data!r}
        orbits = {orbits!r}
        tasks = ["classification", {{ kind = "classification", probabilities = true }}]
        [[models]]
        name = "a"
        path = "a.safetensors"
        [[models]]
        name = "b"
        path = "b.safetensors"
    """).replace("'", '"'))
    import orbitscope.tasks.setup as setup

    calls: list[str] = []
    real = setup.task_and_data
    monkeypatch.setattr(setup, "task_and_data", lambda kind, *a, **k: calls.append(kind) or real(kind, *a, **k))
    plan = load_sweep(folder / "s.toml")
    expected = []  # the reference: the cross product as a plain loop, models outermost
    for m in models:
        for d in data:
            for o in orbits:
                for t in tasks:
                    expected.append((m, d, o, t))
    assert not isinstance(plan.runs, list) and len(plan.runs) == 24
    assert [(r.model_name, r.data_label, r.orbit_label, r.task_label) for r in plan.runs] == expected
    assert (plan.runs[-1].model_name, plan.runs[-1].orbit_label) == ("b", "shift:-2:2:2")
    assert [r.orbit_label for r in plan.runs[1:6:2]] == [o for _, _, o, _ in expected[1:6:2]]
    with pytest.raises(IndexError):
        plan.runs[24]
    assert len(calls) == 2 * 3 * 2  # each data × orbit × task once, checked before any run; not once per model
    run = plan.runs[15]
    assert expected[15] == ("b", "mnist-subset:test@4", "rotation:0:180:90", "classification,probabilities=True")
    ref = osc.evaluate(run.model, parse_data_spec("mnist-subset:test@4"), "rotation:0:180:90",
                       osc.Classification(store_probabilities=True), model_name="b")
    assert run.options == {} and run.name == "b · mnist-subset:test@4 · rotation:0:180:90 · " + expected[15][3]
    result = osc.sweep([run], store=folder / "runs")
    assert result.outcomes[0].run_id == ref.run_id  # the same run as evaluate's


# ----------------------------------------------------------------------------------- defect 7


def test_dry_run_lists_every_run_and_runs_nothing(folder: Path) -> None:
    (folder / "s.toml").write_text(textwrap.dedent("""
        data = ["mnist-subset:test@8"]
        orbits = ["rotation:0:360:90", "flip"]
        [[models]]
        name = "a"
        path = "a.safetensors"
        [[models]]
        name = "b"
        path = "b.safetensors"
    """))
    proc = run_capped(["sweep", "s.toml", "--dry-run", "--home", "runs", "--out", "out"], cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "4 runs in s.toml" in proc.stdout
    rows = [ln for ln in proc.stdout.splitlines() if "mnist-subset:test@8" in ln]
    expected = [(k + 1, m, o) for k, (m, o) in enumerate((m, o) for m in "ab" for o in ("rotation:0:360:90", "flip"))]
    assert len(rows) == 4
    for row, (k, model, orbit) in zip(rows, expected):
        cells = [c.strip() for c in row.strip().strip("│┃|").split("│")]
        assert cells[0] == str(k) and cells[2] == model and cells[4] == orbit and cells[5] == "classification", row
        assert cells[1] == f"{model} · mnist-subset:test@8 · {orbit}", row
    assert not (folder / "runs").exists() and not (folder / "out").exists()


# ---------------------------------------------------------------------------------- defect 10


BAD_TYPES = {  # the file, what its one line must name
    "factory.toml": ('data = ["mnist-subset:test@4"]\norbits = ["flip"]\n[[models]]\nname = "a"\nfactory = 5\n',
                     ("factory.toml", "[[models]] entry 1 ('a')", "factory", "got 5")),
    "orbit.toml": ('data = ["mnist-subset:test@4"]\norbits = ["flip", 5]\n[[models]]\nname = "a"\npath = "a.safetensors"\n',
                   ("orbit.toml", "orbits entry 2", "got 5")),
    "batch.toml": ('data = ["mnist-subset:test@4"]\norbits = ["flip"]\n[defaults]\nbatch_size = "abc"\n[[models]]\n'
                   'name = "a"\npath = "a.safetensors"\n', ("batch.toml", "[defaults]", "batch_size", "got 'abc'")),
}


def test_wrong_types_are_refused_in_one_line_before_any_run(folder: Path) -> None:
    procs = {}
    for name, (text, _) in BAD_TYPES.items():  # the three commands run side by side
        (folder / name).write_text(text)
        procs[name] = start_capped_cli(["sweep", name, "--home", f"runs-{name}", "--out", f"out-{name}"], cwd=folder)
    for name, proc in procs.items():
        one_line_error(finish_capped_cli(proc, TIMEOUT_S), *BAD_TYPES[name][1])
        assert not (folder / f"runs-{name}").exists(), f"{name}: a run started"


@pytest.mark.parametrize("text, match", [
    ('[[runs]]\nmodel = "a"\ndata = "mnist-subset:test@4"\norbit = "flip"\noptions = { batch_size = 0 }\n',
     r"s\.toml: \[\[runs\]\] entry 1: options: batch_size must be a positive integer.*got 0"),
    ('data = [5]\norbits = ["flip"]\n', r"s\.toml: data entry 1: .*got 5"),
    ('data = ["mnist-subset:test@4"]\norbits = "flip"\ntasks = [{ kind = "detection", view_size = "big" }]\n',
     r"s\.toml: tasks entry 1: view_size must be a positive integer.*got 'big'"),
    ('data = ["mnist-subset:test@4"]\norbits = ["flip"]\ntasks = [3]\n', r"s\.toml: tasks entry 1: .*got 3"),
    ('data = ["mnist-subset:test@4"]\norbits = ["flip"]\n[defaults]\nnormalize = [[0.1], "x"]\n',
     r"s\.toml: \[defaults\]: normalize must be"),
    ('data = ["mnist-subset:test@4"]\norbits = ["flip"]\n[defaults]\ninterpolation = "cubic"\n',
     r"s\.toml: \[defaults\]: interpolation must be bilinear, nearest or bicubic, got 'cubic'"),
    ('data = ["mnist-subset:test@4"]\norbits = ["flip"]\n[defaults]\noptimize = false\nprecision = "bfloat16"\n',
     r"s\.toml: \[defaults\]: precision and compile are optimisations"),
    ('data = ["mnist-subset:test@4"]\norbits = ["flip"]\n[defaults]\nseed = 1.5\n', r"\[defaults\]: seed must be"),
    ('data = ["mnist-subset:test@4"]\norbits = ["flip"]\nstore = 3\n', r"s\.toml: store must be a folder"),
    ('data = ["mnist-subset:test@4"]\norbits = ["rotation:0:x"]\n',
     r"s\.toml: orbits entry 1 'rotation:0:x': "),
])
def test_every_field_is_checked_with_file_entry_and_field(folder: Path, text: str, match: str) -> None:
    model = '[[models]]\nname = "a"\npath = "a.safetensors"\n'
    (folder / "s.toml").write_text(text.replace("[[runs]]", model + "[[runs]]", 1) if "[[runs]]" in text
                                   else text + model)
    with pytest.raises(SpecError, match=match):
        load_sweep(folder / "s.toml")


def test_model_entries_are_checked_before_any_model_loads(folder: Path) -> None:
    base = 'data = ["mnist-subset:test@4"]\norbits = ["flip"]\n'
    cases = {
        '[[models]]\nname = "a"\nfactory = "x:y"\nkwargs = 3\n': r"\[\[models\]\] entry 1 \('a'\): kwargs must be a table",
        '[[models]]\nname = "a"\npath = 7\n': r"\[\[models\]\] entry 1 \('a'\): path must be .*got 7",
        '[[models]]\nname = "a"\nfactory = "nocolon"\n': r"factory must be .*'package\.module:function'",
        '[[models]]\nname = "a"\npath = "a.safetensors"\n[[models]]\nname = "b"\nfactory = "x:y"\nweights = []\n':
            r"\[\[models\]\] entry 2 \('b'\): weights must be",
        '[[models]]\nname = "a"\npath = "missing.safetensors"\n': r"\[\[models\]\] entry 1 \('a'\): .*missing\.safetensors",
        '[[models]]\nname = "a"\nfactory = "no_such_module_h38:make"\n':
            r"s\.toml: \[\[models\]\] entry 1 \('a'\): cannot import module 'no_such_module_h38'",
        '[[models]]\nname = "a"\nfactory = "torch.nn:NoSuchLayer"\n':
            r"s\.toml: \[\[models\]\] entry 1 \('a'\): module 'torch\.nn' has no attribute 'NoSuchLayer'",
    }
    for text, match in cases.items():
        (folder / "s.toml").write_text(base + text)
        with pytest.raises((SpecError, FileNotFoundError, ImportError), match=match):  # str() names the entry
            load_sweep(folder / "s.toml")


def test_a_failed_run_is_reported_without_markup(folder: Path) -> None:
    from typer.testing import CliRunner

    from orbitscope.cli import app

    (folder / "broken_net.py").write_text("import torch\n\nclass Net(torch.nn.Module):\n"
                                          "    def forward(self, x):\n        raise ValueError('[bold]broken[/]')\n")
    (folder / "s.toml").write_text('data = ["mnist-subset:test@4"]\norbits = ["flip"]\n[[models]]\nname = "x"\n'
                                   'factory = "broken_net:Net"\n')
    result = CliRunner().invoke(app, ["sweep", str(folder / "s.toml"), "--home", str(folder / "runs"), "--out",
                                      str(folder / "out"), "--no-report"], env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    failed = [ln for ln in result.output.splitlines() if ln.startswith("failed:")]
    assert len(failed) == 1 and ": [bold]broken[/]" in failed[0], result.output  # the user's text as it is
    assert "[bold red]" not in result.output


# ------------------------------------------------------------------------- the file's own bounds


def test_a_file_too_big_too_deep_or_holding_itself_is_refused(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = folder / "s.yaml"
    p.write_text("models: &m [{name: a, path: a.safetensors, kwargs: {again: *m}}]\n")
    with pytest.raises(SpecError, match=r"s\.yaml: .*holds itself"):
        read_sweep_file(p)
    p.write_text("models: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(SpecError, match=r"s\.yaml.*(nested too deeply|maximum nesting depth)"):  # PyYAML, libyaml
        read_sweep_file(p)
    deep = folder / "deep.toml"
    deep.write_text("name = " + "[" * 40 + "1" + "]" * 40 + "\n")
    with pytest.raises(SpecError, match=rf"deep\.toml: .*nested more than {sweep_file.MAX_SWEEP_DEPTH} levels"):
        read_sweep_file(deep)
    (folder / "digits.toml").write_text("name = 1" + "0" * 5000 + "\n")
    with pytest.raises(SpecError, match=r"digits\.toml is not valid TOML"):
        read_sweep_file(folder / "digits.toml")
    monkeypatch.setattr(sweep_file, "MAX_SWEEP_FILE_BYTES", 100)
    (folder / "long.toml").write_text("name = '" + "x" * 20_000 + "'\n")
    with pytest.raises(SpecError, match=r"long\.toml is 20,010 bytes, over the limit of 10,240 bytes.*--max-runs"):
        read_sweep_file(folder / "long.toml", max_runs=10)
    assert len(read_sweep_file(folder / "long.toml", max_runs=20)["name"]) == 20_000
    (folder / "keys.yaml").write_text("{b: y, 1: x, 2.5: z}\n")
    with pytest.raises(SpecError, match=r"keys\.yaml: unknown key\(s\) 1, 2\.5, b; allowed"):
        load_sweep(folder / "keys.yaml")


# ------------------------------------------------------------------------------ the --name minor


def test_a_reused_run_keeps_its_name_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = build_model(SMALL)
    data = parse_data_spec("mnist-subset:test@6")
    first = osc.evaluate(model, data, "flip", store=tmp_path / "runs", name="first")
    with caplog.at_level(logging.WARNING, logger="orbitscope"):
        again = osc.evaluate(model, data, "flip", store=tmp_path / "runs", name="first")
        unnamed = osc.evaluate(model, data, "flip", store=tmp_path / "runs")
    assert not [r for r in caplog.records if "earlier name" in r.getMessage()]
    with caplog.at_level(logging.WARNING, logger="orbitscope"):
        second = osc.evaluate(model, data, "flip", store=tmp_path / "runs", name="second")
    said = [r.getMessage() for r in caplog.records if "earlier name" in r.getMessage()]
    assert said == [f"run {first.run_id} is reused under its earlier name 'first', not 'second'; to store it under "
                    "the new name, evaluate again with --force (resume=False), which recomputes it"]
    assert first.run_id == again.run_id == unnamed.run_id == second.run_id and second.reused
    assert [r.name for r in osc.Store(tmp_path / "runs").runs()] == ["first"]


def test_a_long_error_is_one_line_when_stderr_is_a_pipe(folder: Path) -> None:
    """Without COLUMNS, a piped stderr is 80 columns wide for rich: the message must not be broken
    into several lines there (the issue's 'one line' holds in CI logs too)."""
    import os
    import sys

    (folder / "big.toml").write_text(billion_runs_toml())
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cli = [sys.executable, "-c", "from orbitscope.cli import app; app()"]
    proc = subprocess.run([*cli, "sweep", "big.toml", "--dry-run"], cwd=folder, capture_output=True, text=True,
                          timeout=120, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and len(lines[0]) > 80, proc.stderr[-2000:]

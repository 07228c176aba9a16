"""Issue 38, minors: ``orbitscope check`` / ``plan`` refuse non-finite and negative thresholds with
one line; ``runs list`` / ``runs show`` say ``interrupted`` for a run marked running whose writer
process is gone; the interface answers 404, not 500, to paths under ``/_dash-component-suites/``
that Dash refuses (``../`` and unknown packages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orbitscope.cli import app
from orbitscope.results.store import Store

runner = CliRunner()


def one_error_line(result) -> str:  # noqa: ANN001 - click's Result
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("option, value", [("--max-drop", "inf"), ("--max-drop", "nan"), ("--max-drop", "-inf"),
                                           ("--max-drop", "1e999"), ("--max-regression", "inf"),
                                           ("--max-regression", "nan"), ("--alpha", "nan")])
def test_check_refuses_non_finite_thresholds(option: str, value: str, tmp_path: Path) -> None:
    args = ["check", "nomodule:factory", "--data", "mnist-subset:test@10", "--orbit", "rotation90",
            "--home", str(tmp_path), f"{option}={value}"]
    if option == "--max-regression":
        args += ["--baseline", "nomodule:other"]
    line = one_error_line(runner.invoke(app, args, env={"COLUMNS": "400"}))
    assert f"{option} must be a finite number" in line, line


@pytest.mark.parametrize("option", ["--max-drop", "--max-regression"])
def test_check_refuses_negative_tolerances(option: str, tmp_path: Path) -> None:
    args = ["check", "nomodule:factory", "--baseline", "nomodule:other", "--home", str(tmp_path), f"{option}=-0.5"]
    line = one_error_line(runner.invoke(app, args, env={"COLUMNS": "400"}))
    assert f"{option} is a tolerance" in line and "-0.5" in line, line


@pytest.mark.parametrize("option, value", [("--delta", "inf"), ("--delta", "nan"), ("--max-drop", "inf"),
                                           ("--accuracy", "nan"), ("--power", "inf")])
def test_plan_refuses_non_finite_values(option: str, value: str) -> None:
    args = ["plan", "--delta", "0.1", "--elements", "3", "--accuracy", "0.9", f"{option}={value}"]
    line = one_error_line(runner.invoke(app, args, env={"COLUMNS": "400"}))
    assert f"{option} must be a finite number" in line, line


def test_finite_thresholds_still_plan() -> None:
    result = runner.invoke(app, ["plan", "--delta", "0.1", "--elements", "3", "--accuracy", "0.9",
                                 "--max-drop", "0"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output


def _running_run(home: Path) -> str:
    """A run left 'running' in the catalog, as a writer killed mid-run leaves it."""
    import torch

    from orbitscope import evaluate
    from orbitscope.data import ArrayDataset
    from orbitscope import Rotation
    from helpers import interrupt_after

    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    torch.manual_seed(0)
    data = ArrayDataset(torch.rand(8, 1, 8, 8).numpy(), torch.arange(8).remainder(3).numpy(), "tiny")
    with pytest.raises(KeyboardInterrupt):
        evaluate(net, data, Rotation(angles=[0, 90]), store=Store(home), batch_size=4, name="halfway",
                 progress=interrupt_after(1))
    (rec,) = Store(home).runs()
    assert rec.status == "running"
    return rec.run_id


def test_runs_list_says_interrupted_when_the_writer_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orbitscope.cli.common import console

    # the table's console was sized when the CLI was imported: widen it so no cell wraps
    monkeypatch.setattr(console, "width", 400)
    home = tmp_path / "home"
    run_id = _running_run(home)
    store = Store(home)
    lock = home / "runs" / f"{run_id}.lock"
    assert lock.read_text() == ""  # released: no pid left behind
    assert not store.writer_alive(run_id)
    listed = runner.invoke(app, ["runs", "list", "--home", str(home)], env={"COLUMNS": "400"})
    assert listed.exit_code == 0 and "interrupted" in listed.output and "running" not in listed.output, listed.output
    # a live writer (this process's pid in the lock): running
    lock.write_text(str(os.getpid()))
    assert store.writer_alive(run_id)
    listed = runner.invoke(app, ["runs", "list", "--home", str(home)], env={"COLUMNS": "400"})
    assert "running" in listed.output and "interrupted" not in listed.output, listed.output
    # a writer that exited without releasing (killed): its pid names no process
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(dead.stdout.strip())
    assert not store.writer_alive(run_id)
    shown = runner.invoke(app, ["runs", "show", run_id, "--home", str(home)], env={"COLUMNS": "400"})
    assert "(interrupted)" in shown.output, shown.output


def test_the_lock_holds_the_writer_pid_while_it_writes(tmp_path: Path) -> None:
    store = Store(tmp_path / "home")
    with store.run_lock("a" * 64):
        (lock,) = (tmp_path / "home" / "runs").glob("*.lock")
        assert lock.read_text() == str(os.getpid())
    assert lock.read_text() == ""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from orbitscope.app.server import create_app

    home = tmp_path_factory.mktemp("empty-store")
    Store(home)
    return create_app(home).server.test_client()


@pytest.mark.parametrize("path", [
    "/_dash-component-suites/dash/../../../etc/passwd",
    "/_dash-component-suites/dash/..%2f..%2f..%2fetc%2fpasswd",
    "/_dash-component-suites/dash/dcc/%2e%2e%2f%2e%2e%2fversion.py",
    "/_dash-component-suites/dash/x/../../../../../../etc/passwd",
    "/_dash-component-suites/no_such_package/x.js",
    "/_dash-component-suites/plotly/../../setup.py",
])
def test_component_suite_traversal_is_404(client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404, (response.status_code, response.data[:200])
    assert b"Traceback" not in response.data and b"root:" not in response.data


def test_component_suites_still_serve_dash_files(client) -> None:
    page = client.get("/").data.decode()
    script = next(part.split('"')[0] for part in page.split('src="')[1:] if "_dash-component-suites" in part)
    assert client.get(script).status_code == 200

"""``orbitscope sweep SWEEP.toml``: many runs through one executor, one progress view, a summary
table and the reports of the sweep."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .common import HomeOption, TrustOption, console, err_console, executor_from_options, friendly_errors

__all__ = ["sweep_command", "ExecutorOption", "AddressOption", "WorkersOption"]

ExecutorOption = typer.Option(None, "--executor", help="Where jobs run: local, process (--workers processes) or ray "
                              "(a local Ray with --workers CPUs, or the cluster at --address).")
AddressOption = typer.Option(None, "--address", help="Ray cluster to join: auto, HOST:PORT or ray://HOST:PORT "
                             "(default: a local Ray).")
WorkersOption = typer.Option(None, "--workers", help="Processes (process) or CPUs of a local Ray (ray).")


class _View:
    """One rich progress view over all runs of a sweep: a line for the whole sweep, one per run."""

    def __init__(self, labels: list[str]) -> None:
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=err_console)
        self.total = self.bar.add_task("[bold]sweep", total=len(labels), status="runs")
        self.lines = [self.bar.add_task(f"  {label[:60]}", total=None, status="waiting", start=False)
                      for label in labels]
        self.finished: set[int] = set()

    def __enter__(self) -> "_View":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def __call__(self, index: int, done: int, total: int | None, status: str) -> None:
        line = self.lines[index]
        if status in ("running", "planned"):
            self.bar.start_task(line)
        self.bar.update(line, completed=done, total=total, status=status)
        if status in ("done", "reused", "failed") and index not in self.finished:
            self.finished.add(index)
            self.bar.update(self.total, completed=len(self.finished))


def _fmt(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _write_reports(result: Any, out: Path) -> list[Path]:
    """One report per group of runs that share data, orbit and task (a report compares runs over
    one orbit), named after the group."""
    from ..viz.report import write_report

    groups: dict[tuple[str, str, str], list[Any]] = {}
    for o in result.outcomes:
        if o.run is not None:
            r = o.run.result
            key = (o.spec.data_label, str(r.attrs.get("orbit")), str(o.spec.task_label))
            groups.setdefault(key, []).append(o)
    paths = []
    for k, (key, members) in enumerate(groups.items()):
        data, orbit, task = key
        stem = "report" if len(groups) == 1 else f"report-{k + 1:02d}"
        path = write_report([o.run.result for o in members], out / f"{stem}.html",
                            labels=[o.spec.model_name or o.name for o in members],
                            title=f"sweep: {task} on {data} over {orbit}")
        paths.append(path)
    return paths


@friendly_errors
def sweep_command(
    file: Path = typer.Argument(..., help="The sweep file (.toml, or .yaml/.yml): models, data, orbits, tasks."),
    home: Optional[Path] = HomeOption,
    executor: Optional[str] = ExecutorOption,
    address: Optional[str] = AddressOption,
    workers: Optional[int] = WorkersOption,
    out: Path = typer.Option(Path("sweep-output"), "--out", help="Folder for the summary CSV and the reports."),
    report: bool = typer.Option(True, "--report/--no-report", help="Write the reports of the sweep."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the file, list its runs and stop (nothing runs)."),
    max_runs: Optional[int] = typer.Option(None, "--max-runs", help="The most runs the sweep may have (default "
                                           "10,000, or $ORBITSCOPE_MAX_SWEEP_RUNS); the file is refused above it."),
    force: bool = typer.Option(False, "--force", help="Recompute runs already in the store."),
    trust: bool = TrustOption,
) -> None:
    """Run every evaluation of a sweep file (skipping runs already in the store), show one
    progress view, print a summary table and write the reports of the sweep. The whole file is
    checked (and its runs counted) before any run starts."""
    from ..engine.sweep_file import load_sweep
    from ..results.store import Store

    if max_runs is not None and max_runs < 1:
        raise ValueError(f"--max-runs must be at least 1, got {max_runs}")
    plan = load_sweep(file, trust=trust, max_runs=max_runs)
    if dry_run:
        table = Table(title=Text(f"{len(plan.runs):,} run{'' if len(plan.runs) == 1 else 's'} in {file}"))
        for col in ("#", "run", "model", "data", "orbit", "task"):
            table.add_column(col, overflow="fold")
        for k, r in enumerate(plan.runs):  # the file's own text: never read as markup
            table.add_row(str(k + 1), *(Text(v) for v in (r.label or "", r.model_name or "", r.data_label,
                                                          r.orbit_label or str(r.orbit), r.task_label)))
        console.print(table)
        return
    ex_name = executor or plan.executor
    runner = executor_from_options(ex_name, address, workers, plan.executor_options if executor is None else None)
    store = Store(home if home is not None else plan.store)
    with _View([r.label or "" for r in plan.runs]) as view:
        result = plan.run(store=store, executor=runner, progress=view, resume=not force)
    rows = result.rows()
    table = Table(title=f"sweep {plan.name}: {len(rows)} runs in {result.seconds:.1f} s on {result.executor}")
    table.add_column("run", overflow="fold", ratio=3)
    for col in ("status", "id", "samples", "s", "metric", "identity", "mean", "worst"):
        table.add_column(col, overflow="fold")
    for row in rows:
        status = {"failed": "[red]failed[/]", "reused": "reused"}.get(row["status"], row["status"])
        table.add_row(Text(row["run"]), status, row["run_id"][:8], str(row["samples"]), _fmt(row["seconds"]),
                      row["metric"], _fmt(row["at_identity"]), _fmt(row["mean"]), _fmt(row["worst"]))
    console.print(table)
    for o in result.failed:
        err_console.print(Text("failed: ", style="bold red") + Text(o.error or ""), emoji=False, soft_wrap=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "summary.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["run"])
        writer.writeheader()
        writer.writerows(rows)
    console.print(f"summary → {out / 'summary.csv'}; runs → {store.home}")
    if report and result.runs:
        for path in _write_reports(result, out):
            console.print(f"report → {path} ({path.stat().st_size / 1e6:.1f} MB)")
    if result.failed:
        raise typer.Exit(1)

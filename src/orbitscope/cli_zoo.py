"""CLI for ML4ML: ``orbitscope zoo train | list | show | label | evaluate | fit`` and ``orbitscope assess``.

Mounted on the main app by :mod:`orbitscope.cli` (imported at its end, so the shared helpers
below exist).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from .cli import HomeOption, _friendly_errors, console, err_console

zoo_app = typer.Typer(help="Model zoos and the model database for ML4ML assessors.", no_args_is_help=True)

_LABEL_KEYS = {"i": "invariant", "b": "borderline", "n": "not-invariant"}


@zoo_app.command("train")
@_friendly_errors
def zoo_train(
    family: str = typer.Option(..., "--family", help="Model family: mnist-small, mnist-wide, fashion-small, fashion-wide."),
    n: int = typer.Option(..., "--n", help="Number of members to build (members start … start+n−1)."),
    start: int = typer.Option(0, "--start", help="First member index."),
    workers: int = typer.Option(2, "--workers", help="Local processes training in parallel."),
    home: Optional[Path] = HomeOption,
) -> None:
    """Train a family of small models with controlled variations and record their variance
    matrices, metrics and provenance labels (resumes: members already recorded are skipped)."""
    from .zoo import FAMILIES, build_family

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("models"),
               TimeElapsedColumn(), TimeRemainingColumn())
    t0 = time.perf_counter()
    with Progress(*columns, console=err_console) as bar:
        task = bar.add_task(f"zoo {family}", total=n)
        report = build_family(family, n, store=home, workers=workers, start=start,
                              progress=lambda done, total, _name: bar.update(task, completed=done))
    console.print(f"{family}: built {len(report.built)}, already there {len(report.skipped)}, "
                  f"failed {len(report.failed)} in {time.perf_counter() - t0:.1f} s")
    for name, why in report.failed.items():
        err_console.print(f"[red]failed[/] {name}: {escape(why)}")
    if report.failed:
        raise typer.Exit(1)


@zoo_app.command("list")
@_friendly_errors
def zoo_list(
    family: Optional[str] = typer.Option(None, "--family", help="Only this family."),
    home: Optional[Path] = HomeOption,
) -> None:
    """List the models of the database with provenance, metrics and labels."""
    from .modeldb import ModelDatabase

    db = ModelDatabase(home)
    models = db.models(family)
    table = Table(title=f"model database in {db.store.home}: {len(models)} models")
    table.add_column("model", no_wrap=True)
    for col in ("aug (°)", "ep", "lr", "noise", "imb", "n", "acc0", "worst", "all ok", "label", "human"):
        table.add_column(col)
    for m in models:
        p, k = m.provenance, m.metrics
        rng = p.get("augmentation_range")
        aug = p["relation"] + (f" {rng[0]:g}-{rng[1]:g}" if rng else "")
        humans = ", ".join(f"{lb.labeller}: {lb.label}" for lb in m.labels if lb.source == "human")
        table.add_row(m.model_id, aug, str(p["epochs"]), f"{p['lr']:g}", f"{p['label_noise']:g}",
                      f"{p['class_imbalance']:g}", str(p["n_train"] or "all"), f"{k['accuracy_identity']:.2f}",
                      f"{k['accuracy_worst']:.2f}", f"{k['all_correct_share']:.2f}", m.label() or "", humans)
    console.print(table)


@zoo_app.command("show")
@_friendly_errors
def zoo_show(
    model_id: str = typer.Argument(..., help="Model id, e.g. mnist-small-003."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Matrix panel image (default <home>/zoo/panels/<id>.png)."),
    home: Optional[Path] = HomeOption,
) -> None:
    """Print a model's provenance, metrics and labels, and write its matrix panel."""
    from .modeldb import ModelDatabase

    db = ModelDatabase(home)
    m = db.get(model_id)
    path = _write_panel(db, m, output)
    console.print(f"[bold]{m.model_id}[/] (family {m.family})")
    for key, value in {**m.provenance, **m.metrics}.items():
        console.print(f"  {key}: {value}")
    for lb in m.labels:
        console.print(f"  label ({lb.source}, {escape(lb.labeller)}): {lb.label}")
    console.print(f"matrix panel: {path}")


def _write_panel(db: object, m: object, output: Path | None) -> Path:
    from .matrix_plots import save_panel

    path = output or db.zoo_dir / "panels" / f"{m.model_id}.png"  # type: ignore[attr-defined]
    p = m.provenance  # type: ignore[attr-defined]
    title = (f"{m.model_id}: augmentation {p['relation']}, accuracy at identity "  # type: ignore[attr-defined]
             f"{m.metrics['accuracy_identity']:.2f}")  # type: ignore[attr-defined]
    return save_panel(m.load_matrices(), path, title=title)  # type: ignore[attr-defined]


@zoo_app.command("label")
@_friendly_errors
def zoo_label(
    models: Optional[list[str]] = typer.Argument(None, help="Model ids (default: every model you have not labelled)."),
    by: str = typer.Option(..., "--by", help="Your name (stored with the label)."),
    label: Optional[str] = typer.Option(None, "--as", help="invariant, borderline or not-invariant; without it "
                                        "each model's matrix panel is written and you are asked."),
    note: str = typer.Option("", "--note", help="A note stored with the label."),
    home: Optional[Path] = HomeOption,
) -> None:
    """Record human invariance labels.

    Interactive without --as: for each model its matrix panel is written (path printed; open it)
    and you answer i(nvariant), b(orderline), n(ot invariant), s(kip) or q(uit); each answer is
    saved at once.
    """
    from .modeldb import LABELS, ModelDatabase

    db = ModelDatabase(home)
    if label is not None and label not in LABELS:
        raise ValueError(f"--as must be one of {LABELS}, got {label!r}")
    chosen = [db.get(mid) for mid in models] if models else [
        m for m in db.models() if m.label("human", by.strip()) is None]
    if not chosen:
        console.print("nothing to label: every model already has your label (pass model ids to relabel)")
        return
    saved = 0
    for m in chosen:
        if label is not None:
            db.set_label(m.model_id, label, source="human", labeller=by, note=note)
            saved += 1
            continue
        path = _write_panel(db, m, None)
        console.print(f"\n[bold]{m.model_id}[/]: matrices in {path}")
        while True:
            answer = typer.prompt("invariant (i) / borderline (b) / not invariant (n) / skip (s) / quit (q)").strip().lower()
            if answer in _LABEL_KEYS or answer in ("s", "q"):
                break
            console.print("please answer i, b, n, s or q")
        if answer == "q":
            break
        if answer == "s":
            continue
        db.set_label(m.model_id, _LABEL_KEYS[answer], source="human", labeller=by, note=note)
        saved += 1
    console.print(f"saved {saved} label(s) by {escape(by)}")

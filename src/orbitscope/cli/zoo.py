"""CLI for ML4ML: ``orbitscope zoo train | lee | list | show | label | evaluate | fit`` and ``orbitscope assess``.

Mounted on the main app by :mod:`orbitscope.cli.commands` (imported at its end, so the shared helpers
below exist).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from .common import HomeOption, TrustOption, console, err_console, friendly_errors, parse_normalize
from .common import executor_from_options
from .sweep import AddressOption, ExecutorOption

if TYPE_CHECKING:  # imported lazily at run time to keep CLI start-up short
    from ..ml4ml.modeldb import ModelDatabase, ZooModel

zoo_app = typer.Typer(help="Model zoos and the model database for ML4ML assessors.", no_args_is_help=True)

_LABEL_KEYS = {"i": "invariant", "b": "borderline", "n": "not-invariant"}
FeaturesOption = typer.Option("raw", "--features", help="raw (ML4ML's 80 features), relative (activation "
                              "matrices relative to the signal at the identity) or both.")
StudyOption = typer.Option(None, "--study", help="Read the models from this study file (orbitscope zoo export) "
                           "instead of the store's database; 'shipped' = the study shipped with orbitscope.")


def _database(home: Path | None, study: Path | None) -> Any:
    """The store's model database, or the study file ``study`` (``shipped``: the shipped one)."""
    if study is not None:
        from ..ml4ml.study import SHIPPED_STUDY, Study

        return Study.load(SHIPPED_STUDY if str(study) == "shipped" else study)
    from ..ml4ml.modeldb import ModelDatabase

    return ModelDatabase(home, create=False)


@zoo_app.command("train")
@friendly_errors
def zoo_train(
    family: str = typer.Option(..., "--family", help="Model family: mnist-small, mnist-wide, fashion-small, fashion-wide."),
    n: int = typer.Option(..., "--n", help="Number of members to build (members start … start+n−1)."),
    start: int = typer.Option(0, "--start", help="First member index."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Processes training in parallel (default 2; "
                                          "1 = in this process), or the CPUs of a local Ray (--executor ray)."),
    executor: Optional[str] = ExecutorOption,
    address: Optional[str] = AddressOption,
    home: Optional[Path] = HomeOption,
) -> None:
    """Train a family of small models with controlled variations and record their variance
    matrices, metrics and provenance labels (resumes: members already recorded are skipped).
    Workers only train and measure; this process writes every file and database row."""
    from ..ml4ml.zoo import FAMILIES, build_family

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    # one torch thread per job, as zoo members always train (results do not depend on the executor)
    defaults = {"threads": 1} if executor in ("process", "ray") else None
    runner = executor_from_options(executor, address, workers, defaults)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("models"),
               TimeElapsedColumn(), TimeRemainingColumn())
    t0 = time.perf_counter()
    with Progress(*columns, console=err_console) as bar:
        task = bar.add_task(f"zoo {family}", total=n)
        report = build_family(family, n, store=home, workers=workers or 2, start=start, executor=runner,
                              progress=lambda done, total, _name: bar.update(task, completed=done))
    console.print(f"{family}: built {len(report.built)}, already there {len(report.skipped)}, "
                  f"failed {len(report.failed)} in {time.perf_counter() - t0:.1f} s")
    for name, why in report.failed.items():
        err_console.print(f"[red]failed[/] {name}: {escape(why)}")
    if report.failed:
        raise typer.Exit(1)


@zoo_app.command("lee")
@friendly_errors
def zoo_lee(
    output: Path = typer.Argument(..., help="The LEE feature file to write (.npz)."),
    family: list[str] = typer.Option(..., "--family", help="Zoo families (repeat), e.g. mnist-small-3."),
    n: int = typer.Option(26, "--n", help="Members per family (0 … n−1)."),
    workers: int = typer.Option(2, "--workers", help="Processes (one torch thread each)."),
    home: Optional[Path] = HomeOption,
) -> None:
    """LEE features of zoo members for ML4ML's assessors (orbitscope.ml4ml.lee_features): each
    member is retrained from its recipe (or read from the store's zoo cache) and differentiated
    along its invariances' generators; resumes where it stopped."""
    from ..ml4ml.lee_features import compute_zoo_lee
    from ..results.store import Store

    store = Store(home)
    t0 = time.perf_counter()
    path = compute_zoo_lee(family, n, store.home, output, workers=workers, say=lambda m: err_console.print(escape(m)))
    console.print(f"wrote {path} in {time.perf_counter() - t0:.0f} s")


@zoo_app.command("list")
@friendly_errors
def zoo_list(
    family: Optional[str] = typer.Option(None, "--family", help="Only this family."),
    home: Optional[Path] = HomeOption,
) -> None:
    """List the models of the database with provenance, metrics and labels."""
    from ..ml4ml.modeldb import ModelDatabase

    db = ModelDatabase(home, create=False)
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
@friendly_errors
def zoo_show(
    model_id: str = typer.Argument(..., help="Model id, e.g. mnist-small-003."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Matrix panel image (default <home>/zoo/panels/<id>.png)."),
    home: Optional[Path] = HomeOption,
) -> None:
    """Print a model's provenance, metrics and labels, and write its matrix panel."""
    from ..ml4ml.modeldb import ModelDatabase

    db = ModelDatabase(home, create=False)
    m = db.get(model_id)
    path = _write_panel(db, m, output)
    console.print(f"[bold]{m.model_id}[/] (family {m.family})")
    for key, value in {**m.provenance, **m.metrics}.items():
        console.print(f"  {key}: {value}")
    for lb in m.labels:
        console.print(f"  label ({lb.source}, {escape(lb.labeller)}): {lb.label}")
    console.print(f"matrix panel: {path}")


@zoo_app.command("export")
@friendly_errors
def zoo_export(
    output: Path = typer.Argument(..., help="Study file to write (.npz)."),
    family: Optional[list[str]] = typer.Option(None, "--family", help="Only these families (repeatable)."),
    home: Optional[Path] = HomeOption,
) -> None:
    """Write the database as one compact study file: features, matrices, correctness and labels
    of every model and invariance, no weights (for 'zoo evaluate --study', or to share a study)."""
    from ..ml4ml.modeldb import ModelDatabase
    from ..ml4ml.study import Study, export_study

    db = ModelDatabase(home, create=False)
    t0 = time.perf_counter()
    with Progress(TextColumn("[bold]export"), BarColumn(), MofNCompleteColumn(), TextColumn("models"),
                  TimeElapsedColumn(), console=err_console) as bar:
        task = bar.add_task("export", total=None)
        path = export_study(db, output, families=family,
                            progress=lambda done, total: bar.update(task, completed=done, total=total))
    st = Study.load(path)
    fams = ", ".join(f"{k} ({v})" for k, v in st.families().items())
    console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): {len(st.models())} models in {fams}, "
                  f"{len(st.labels())} labels, in {time.perf_counter() - t0:.1f} s")


def _write_panel(db: ModelDatabase, m: ZooModel, output: Path | None) -> Path:
    from ..ml4ml.matrix_plots import save_panel

    path = output or db.zoo_dir / "panels" / f"{m.model_id}.png"
    title = (f"{m.model_id}: augmentation {m.provenance['relation']}, accuracy at identity "
             f"{m.metrics['accuracy_identity']:.2f}")
    return save_panel(m.load_matrices(), path, title=title)


@zoo_app.command("label")
@friendly_errors
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
    from ..ml4ml.modeldb import LABELS, ModelDatabase

    db = ModelDatabase(home, create=False)
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


def _parse_labels(labels: str) -> tuple[str, str | None]:
    source, _, who = labels.partition(":")
    if source not in ("provenance", "human"):
        raise ValueError(f"--labels must be 'provenance', 'human' or 'human:NAME', got {labels!r}")
    return source, (who or None)


def _default_bundle_path(db: Any, name: str, labels: str) -> Path:
    return db.zoo_dir / "assessors" / f"{name}-{labels.replace(':', '-')}.joblib"


@zoo_app.command("evaluate")
@friendly_errors
def zoo_evaluate(
    labels: str = typer.Option("provenance", "--labels", help="provenance, human, or human:NAME."),
    invariance: str = typer.Option("rotation", "--invariance", help="rotation, brightness, scale, or all (one "
                                   "table each, with the paired test of the best assessor against the best "
                                   "baseline)."),
    repeats: int = typer.Option(10, "--repeats", help="Repetitions of the family-held-out cross-validation."),
    folds: int = typer.Option(3, "--folds", help="Folds per repetition (whole families per fold)."),
    borderline: str = typer.Option("drop", "--borderline", help="drop, invariant or not-invariant."),
    cnn: bool = typer.Option(True, "--cnn/--no-cnn", help="Include the CNN on matrix images."),
    seed: int = typer.Option(0, "--seed"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="CSV of the accuracies."),
    features: str = FeaturesOption,
    study: Optional[Path] = StudyOption,
    home: Optional[Path] = HomeOption,
) -> None:
    """Cross-validate the assessors and the formula baselines with whole families held out."""
    from ..ml4ml.assess import feature_importances
    from ..ml4ml.assess.pipeline import assessment_data, compare_assessors, fit_assessor

    source, who = _parse_labels(labels)
    db = _database(home, study)
    if invariance == "all":
        _evaluate_all(db, source, who, borderline, repeats, folds, seed, cnn, output, features)
        return
    data = assessment_data(db, labels=source, labeller=who, borderline=borderline, invariance=invariance,
                           features=features)
    fams = sorted(set(data.families.tolist()))
    console.print(f"{data.n_models} labelled models ({int(data.y.sum())} invariant) in {len(fams)} families: "
                  f"{', '.join(fams)}; labels: {data.label_source}")
    t0 = time.perf_counter()
    report = compare_assessors(data, repeats=repeats, folds=folds, seed=seed, include_cnn=cnn)
    console.print(report.table(), highlight=False, soft_wrap=True)
    from ..ml4ml.assess.pipeline import assessor_vs_baseline

    try:
        test = assessor_vs_baseline(report)
    except ValueError as exc:  # fewer than two tested splits
        console.print(f"best assessor vs best baseline: no paired test ({exc}); use more repeats or families")
    else:
        console.print(test.sentence(naive=True))
    console.print(f"(cross-validation took {time.perf_counter() - t0:.1f} s)")
    forest = fit_assessor(data, "random_forest", seed=seed)
    table = Table(title="random forest on all models: top feature importances")
    table.add_column("feature")
    table.add_column("importance")
    for name, imp in feature_importances(forest.estimator, forest.feature_names)[:12]:
        table.add_row(name, f"{imp:.3f}")
    console.print(table)
    if output is not None:
        from ..results.tables import write_csv

        console.print(f"wrote {write_csv(report.to_rows(), output)}")


def _evaluate_all(db: Any, source: str, who: str | None, borderline: str, repeats: int, folds: int,
                  seed: int, cnn: bool, output: Path | None, features: str) -> None:
    """``zoo evaluate --invariance all``: one cross-validation table per invariance."""
    from ..ml4ml.assess.pipeline import compare_invariances

    rows = []
    for c in compare_invariances(db, labels=source, labeller=who, borderline=borderline, repeats=repeats,
                                 folds=folds, seed=seed, include_cnn=cnn, features=features):
        console.rule(c.invariance)
        if c.report is None:
            console.print(f"{c.invariance}: not assessed ({c.note})")
            continue
        console.print(c.report.table(), highlight=False, soft_wrap=True)
        console.print(c.test_line())
        rows += [{"invariance": c.invariance, **row} for row in c.report.to_rows()]
    if output is not None and rows:
        from ..results.tables import write_csv

        console.print(f"wrote {write_csv(rows, output)}")


@zoo_app.command("fit")
@friendly_errors
def zoo_fit(
    assessor: str = typer.Option("random_forest", "--assessor", help="decision_tree, random_forest, adaboost, "
                                 "logistic_regression or matrix_cnn."),
    labels: str = typer.Option("provenance", "--labels", help="provenance, human, or human:NAME."),
    invariance: str = typer.Option("rotation", "--invariance", help="rotation, brightness or scale (models "
                                   "of the three-invariance families are assessed for all three)."),
    borderline: str = typer.Option("drop", "--borderline", help="drop, invariant or not-invariant."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Bundle file (default <home>/zoo/assessors/…)."),
    seed: int = typer.Option(0, "--seed"),
    features: str = FeaturesOption,
    study: Optional[Path] = StudyOption,
    home: Optional[Path] = HomeOption,
) -> None:
    """Train an assessor on every labelled model and save it for `orbitscope assess`."""
    from ..ml4ml.assess.pipeline import assessment_data, fit_assessor
    from ..ml4ml.modeldb import ModelDatabase

    if study is not None and output is None:
        raise ValueError("with --study, pass -o FILE for the assessor bundle (the store's default bundle is "
                         "the one its own database trained)")
    source, who = _parse_labels(labels)
    data = assessment_data(_database(home, study), labels=source, labeller=who, borderline=borderline,
                           invariance=invariance, features=features)
    bundle = fit_assessor(data, assessor, seed=seed)
    db = ModelDatabase(home, create=False) if output is None else None
    path = output or _default_bundle_path(db, assessor, labels)
    path.parent.mkdir(parents=True, exist_ok=True)
    bundle.save(path)
    default = db.zoo_dir / "assessors" / "default.joblib" if db is not None else None
    if default is not None:
        bundle.save(default)
    console.print(f"trained {assessor} on {data.n_models} models ({data.label_source}); saved {path}"
                  + (f" and {default}" if output is None else ""))


def assess_command(
    model: str = typer.Argument(..., help="'package.module:factory' (with --weights), a TorchScript or torch.export "
                                "file, or an orbitscope .safetensors model file."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="safetensors or state-dict file for a factory."),
    assessor: Optional[Path] = typer.Option(None, "--assessor", help="Assessor bundle (default <home>/zoo/assessors/default.joblib)."),
    data: str = typer.Option("mnist-subset:test", "--data", help="Test data spec (as for evaluate)."),
    per_class: int = typer.Option(30, "--per-class", help="Test images per class (0 = all)."),
    orbit: Optional[str] = typer.Option(None, "--orbit", help="Levels (default: the assessor's, e.g. rotation:-15:15:1)."),
    layers: str = typer.Option("last-conv-2", "--layers", help="Two probed layers, comma-separated module names, "
                               "or last-conv-2 (the last two convolutions)."),
    normalize: Optional[str] = typer.Option(None, "--normalize", help="Model input normalisation 'MEAN,…/STD,…'."),
    output: Path = typer.Option(Path("assess-panel.png"), "-o", "--output", help="Matrix panel image."),
    home: Optional[Path] = HomeOption,
    trust: bool = TrustOption,
) -> None:
    """Judge a model's invariance with a trained assessor: verdict, probability, top features, matrix panel."""
    import os
    import sys

    from ..ml4ml.assess import AssessorBundle
    from ..ml4ml.assess.pipeline import assess_model
    from ..data.datasets import parse_data_spec
    from ..models.loading import load_user_model
    from ..ml4ml.matrix_plots import save_panel
    from ..ml4ml.modeldb import ModelDatabase

    path = assessor or ModelDatabase(home, create=False).zoo_dir / "assessors" / "default.joblib"
    if not path.is_file():
        raise FileNotFoundError(f"no assessor at {path}; build a zoo and train one: 'orbitscope zoo train --family "
                                "mnist-small --n 60' then 'orbitscope zoo fit'")
    bundle = AssessorBundle.load(path, trust=trust)
    dataset = parse_data_spec(data)
    if per_class > 0:
        if not hasattr(dataset, "stratified"):
            raise ValueError("--per-class needs an in-memory dataset; pass --per-class 0")
        dataset = dataset.stratified(per_class)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    net = load_user_model(model, weights, trust=trust)
    probe = tuple(v.strip() for v in layers.split(",") if v.strip())
    verdict = assess_model(net, bundle, dataset, orbit=orbit, layers=probe, normalize=parse_normalize(normalize),
                           model_name=Path(model).stem)
    colour = "green" if verdict.label == "invariant" else "red"
    console.print(f"verdict: [bold {colour}]{verdict.label}[/] (probability invariant {verdict.probability:.2f}; "
                  f"assessor {type(bundle.estimator).__name__} trained on {escape(bundle.label_source)} labels)")
    m = verdict.metrics
    console.print(f"accuracy at identity {m['accuracy_identity']:.3f}, worst {m['accuracy_worst']:.3f} at "
                  f"{m['worst_level']:g}; correct at every level {m['all_correct_share']:.3f}; "
                  f"{m['n_correct']} of {m['n_images']} images correct at identity used for the matrices")
    if verdict.top_features:
        table = Table(title="top features (importance in the assessor; this model's value; training range)")
        for col in ("feature", "importance", "value", "training min", "training max"):
            table.add_column(col)
        for name, imp, val, lo, hi in verdict.top_features:
            flag = " (outside)" if not lo <= val <= hi else ""
            table.add_row(name, f"{imp:.3f}", f"{val:.4g}{flag}", f"{lo:.4g}", f"{hi:.4g}")
        console.print(table)
    if verdict.out_of_range:
        console.print(f"[yellow]note:[/] {len(verdict.out_of_range)} of {len(bundle.feature_names)} features lie "
                      "outside the training models' range; the assessor extrapolates for this model")
    save_panel(verdict.matrices, output, title=f"{Path(model).stem}: {verdict.label} (p = {verdict.probability:.2f})")
    console.print(f"matrix panel: {output}")

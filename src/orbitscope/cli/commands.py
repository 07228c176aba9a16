"""Command-line interface: ``orbitscope demo | evaluate | sweep | runs | plot | report | serve`` (and
``zoo``, ``assess``, ``robust``, the statistics gate ``check`` and planner ``plan``, and ``lee``, the
Lie derivative)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.table import Table

from rich.markup import escape

from .common import (HomeOption, InterpolationOption, PaddingOption, TrustOption, console, engine_progress,
                     evaluate_spec, friendly_errors, load_orbit_run, parse_optimize, progress_bar)

if TYPE_CHECKING:  # the store is imported lazily at run time
    from ..results.store import RunRecord, Store

app = typer.Typer(
    help="orbitscope: evaluate models over transformation-group orbits (NERO plots, reports, stored runs).",
    no_args_is_help=True,
    add_completion=False,
)
runs_app = typer.Typer(help="List and inspect the runs in a store.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")

@app.command()
@friendly_errors
def evaluate(
    model: str = typer.Option(..., "--model", help="'package.module:factory' (with --weights), a TorchScript, "
                              "torch.export or ONNX (.onnx) file, or an orbitscope .safetensors model file."),
    data: str = typer.Option(..., "--data", help="mnist-subset[:train|test], fashion-mnist[:train|test], "
                             "idx:IMAGES,LABELS, folder:PATH or npz:PATH; '@N' keeps the first N samples."),
    orbit: str = typer.Option(..., "--orbit", help="e.g. rotation:0:360:5, shift:-8:8:2, scale:0.7:1.3:0.02, "
                              "flip, d4, d4xt (D4 x time reversal), so3:nero, so3:500, so3-random:500, octahedral, "
                              "'rotation:0:360:30 x scale:0.8:1.2:0.1'."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="safetensors or state-dict file for a factory."),
    home: Optional[Path] = HomeOption,
    name: Optional[str] = typer.Option(None, "--name", help="Run name (default: model class and orbit kind)."),
    batch_size: int = typer.Option(256, help="Samples per chunk (unit of storage and resumption)."),
    normalize: Optional[str] = typer.Option(None, help="Model input normalisation 'MEAN,…/STD,…', applied after the transform."),
    device: str = typer.Option("cpu", help="Device for warping and the model, e.g. cpu or cuda."),
    optimize: str = typer.Option("auto", help="auto: fold BatchNorm into convolutions and use channels_last when "
                                 "the first batch proves the outputs equal (else the model as given); on: require "
                                 "it; off: the model as given."),
    precision: str = typer.Option("float32", help="float32, or mixed precision bfloat16 / float16 (checked on the "
                                  "first batch like every optimisation)."),
    compile_model: bool = typer.Option(False, "--compile", help="Also torch.compile the optimised model (its "
                                       "compile time is reported separately)."),
    interpolation: str = InterpolationOption,
    padding: str = PaddingOption,
    probabilities: bool = typer.Option(False, "--probabilities", help="Also store all class probabilities."),
    consensus: bool = typer.Option(False, "--consensus", help="Also score every element against NERO's consensus "
                                   "(label-free: self-consistency, not correctness)."),
    task_kind: str = typer.Option("classification", "--task", help="classification; detection (a model returning "
                                  "torchvision-style boxes; data with box targets, e.g. coco:ANN.json:IMAGES); or "
                                  "flow (image pairs -> dense (u, v) fields, e.g. --orbit d4xt); or pointcloud "
                                  "(clouds (N, 3) -> class scores, e.g. --data meshes:test --orbit so3:nero)."),
    view_size: Optional[int] = typer.Option(None, "--view-size", help="Detection: the square field of view (pixels) "
                                            "that a window-shift orbit moves over each context image (NERO: 128)."),
    key_objects: bool = typer.Option(True, "--key-objects/--whole-images", help="Detection with --view-size: one "
                                     "context per object covering 10-50 % of the view whose moved view stays inside "
                                     "its image (NERO's selection), or the whole images as contexts."),
    score_threshold: float = typer.Option(0.5, "--score-threshold", help="Detection: detections scoring at least "
                                          "this count for precision, recall and F1."),
    margin: Optional[int] = typer.Option(None, "--margin", help="Detection with --key-objects: context pixels "
                                         "around the view on each side (default: the orbit's largest shift; give it "
                                         "for rotations or scales of the view, whose corners move further)."),
    max_objects: Optional[int] = typer.Option(None, "--max-objects", help="Detection: most ground-truth boxes per "
                                              "image (default: 16, or the data's largest count)."),
    store_inputs: bool = typer.Option(False, "--store-inputs", help="Store the inputs (for the interface's detail "
                                      "views and live re-evaluation)."),
    executor: str = typer.Option("local", help="Where chunks run: local, process (a pool of --workers processes) "
                                 "or ray (a local Ray with --workers CPUs, or the cluster at --address). Results "
                                 "are identical."),
    workers: Optional[int] = typer.Option(None, help="Processes for --executor process (default 2), or CPUs of a "
                                          "local Ray."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster for --executor ray: auto, HOST:PORT "
                                          "or ray://HOST:PORT (default: a local Ray)."),
    yes: bool = typer.Option(False, "--yes", help="Run jobs larger than 20 million model inputs without refusing."),
    trust: bool = TrustOption,
    force: bool = typer.Option(False, help="Recompute even if a finished run with the same identity exists."),
) -> None:
    """Evaluate a model over an orbit of a dataset and store the run (resumes if interrupted)."""
    run = evaluate_spec(
        model, data, orbit, task_kind=task_kind, weights=weights, home=home, name=name, batch_size=batch_size,
        normalize=normalize, device=device, optimize=parse_optimize(optimize), precision=precision,
        compile_model=compile_model, interpolation=interpolation, padding=padding, probabilities=probabilities, consensus=consensus, view_size=view_size, key_objects=key_objects,
        score_threshold=score_threshold, margin=margin, max_objects=max_objects, store_inputs=store_inputs,
        executor=executor, workers=workers, address=address, allow_large=yes, trust=trust, force=force,
    )
    _print_summary([run.result])


def _print_rows(rows: list[dict[str, Any]], skip: tuple[str, ...] = ("run", "elements")) -> None:
    """A table of summary rows (dicts with the same keys), numbers to 3 decimals; headers shortened
    (``consensus_`` → ``c.``, ``conf_iou`` → ``conf×IoU``; the CSV keeps the full names)."""
    if not rows:
        return
    table = Table()
    cols = [c for c in dict.fromkeys(k for row in rows for k in row) if c not in skip]  # rows may differ
    for col in cols:
        table.add_column(col.replace("consensus_", "c.").replace("conf_iou", "conf×IoU"), overflow="fold")
    for row in rows:
        table.add_row(*[_cell(c, row.get(c, "")) for c in cols])
    console.print(table)


def _cell(column: str, value: Any) -> str:
    """A table cell: p-values (columns ending in `` p``) as :func:`~orbitscope.stats.invariance.format_p`
    writes them without the ``p``, other floats to 3 decimals."""
    from ..stats.invariance import format_p

    from ..results.tables import is_p_column

    if isinstance(value, float) and is_p_column(column):
        return format_p(value).removeprefix("p ")
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _print_contrasts(rows: list[dict[str, Any]]) -> None:
    """The headline contrasts of :func:`orbitscope.demos.common.contrast_rows`, two lines each."""
    from ..stats.invariance import format_p

    for row in rows:
        inv = [format_p(v) if isinstance(v, float) else f"n/a ({v})" for v in (row["a invariance p"], row["b invariance p"])]
        console.print(f"  {row['a']} vs {row['b']}, {row['metric']}: orbit means {row['a orbit mean']:.4f} vs "
                      f"{row['b orbit mean']:.4f} (paired t over {row['samples']} samples, "
                      f"{format_p(row['orbit-mean paired t p'])}); invariance: {row['a']} {inv[0]}, {row['b']} {inv[1]}",
                      highlight=False)
        console.print(f"    {row['verdict']}", highlight=False)


def _print_summary(results: list[Any]) -> None:
    """The headline metric of each result over its orbit (a table), then one line per result
    with the test of invariance of its primary metric."""
    from ..analysis.nero import metric_label
    from ..stats.invariance import invariance_test

    headline = results[0].primary_metric()
    table = Table(title=f"{metric_label(results, headline)} over the orbit")
    table.add_column("run", no_wrap=True, min_width=16)
    for col in ("model", "samples", "at identity", "orbit mean", "worst (where)"):
        table.add_column(col, overflow="fold")
    for r in results:
        s = r.summary(headline)
        ident = "—" if s["at_identity"] is None else f"{s['at_identity']:.3f}"
        where = ", ".join(f"{k} {v:g}" for k, v in s["worst_at"].items())
        table.add_row(str(r.attrs.get("run_id", "")), str(r.attrs.get("model_name", "")), str(s["n_samples"]),
                      ident, f"{s['mean']:.3f}", f"{s['worst']:.3f} ({where})")
    console.print(table)
    for r in results:
        run = escape(str(r.attrs.get("run_name") or r.attrs.get("run_id") or r.attrs.get("model_name", "")))
        try:
            sentence = invariance_test(r).sentence()
        except ValueError as exc:  # e.g. an orbit of one element, or no sample with every value defined
            console.print(f"[dim]{run}: no test of invariance ({escape(str(exc))})[/]", soft_wrap=True)
        else:
            console.print(f"{run}: {escape(sentence)}", soft_wrap=True, highlight=False)


def shown_status(store: "Store", rec: "RunRecord") -> str:
    """A run's status as listed: the catalog's, except ``interrupted`` for a run marked ``running``
    whose writer process is gone (evaluating it again resumes it)."""
    if rec.status == "running" and not store.writer_alive(rec.run_id):
        return "interrupted"
    return rec.status


@runs_app.command("list")
@friendly_errors
def runs_list(home: Optional[Path] = HomeOption) -> None:
    """List the runs in the store."""
    from ..results.store import Store

    store = Store(home, create=False)
    table = Table(title=f"runs in {store.home}")
    table.add_column("run id", no_wrap=True, min_width=16)
    for col in ("name", "model", "data", "orbit", "status", "samples", "created"):
        table.add_column(col, overflow="fold")
    for rec in store.runs():
        orbit = ", ".join(f"{k}×{len(v)}" for k, v in rec.layout.get("coords", {}).items()) or rec.orbit.get("kind", "")
        done = rec.n_samples if rec.complete else f"{rec.chunks_done} chunks"
        table.add_row(rec.run_id, rec.name, rec.model_id, rec.data_id, f"{rec.orbit.get('kind')} ({orbit})",
                      shown_status(store, rec),
                      str(done), time.strftime("%Y-%m-%d %H:%M", time.localtime(rec.created)))
    console.print(table)


@runs_app.command("show")
@friendly_errors
def runs_show(run: str = typer.Argument(..., help="Run id, unique id prefix, or run name."),
              home: Optional[Path] = HomeOption) -> None:
    """Show one run: provenance and headline numbers."""
    from ..results.store import Store

    store = Store(home, create=False)
    rec = store.get_run(run)
    console.print(f"[bold]{rec.run_id}[/]  {rec.name}  ({shown_status(store, rec)})")
    for key in ("model_name", "model_hash", "model_class", "data_id", "interpolation", "padding", "normalize", "seed",
                "created", "device"):
        console.print(f"  {key:14s} {rec.attrs.get(key)}")
    console.print(f"  {'orbit':14s} {json.dumps(rec.orbit)[:200]}")
    console.print(f"  {'task':14s} {json.dumps(rec.task)}")
    console.print(f"  {'versions':14s} {json.dumps(rec.attrs.get('versions'))}")
    result = store.load(rec.run_id, allow_partial=not rec.complete)
    from ..lie.run import is_lee_run

    if result.n_samples and is_lee_run(rec):
        from ..lie.summary import layer_shares, lee_rows
        from .lee import print_lee_rows

        rows = lee_rows(result)
        print_lee_rows(rows, {r["generator"]: layer_shares(result, r["generator"]) for r in rows})
    elif result.n_samples:
        _print_summary([result])


def _parse_marker(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    try:
        return {k.strip(): float(v) for k, v in (item.split("=") for item in text.split(","))}
    except ValueError:
        raise ValueError(f"--marker must look like 'angle=90' or 'tx=4,ty=-8', got {text!r}") from None


@app.command()
@friendly_errors
def plot(
    runs: list[str] = typer.Argument(..., help="One or more run ids / prefixes / names, compared."),
    output: Path = typer.Option(..., "-o", "--output", help=".png/.pdf/.svg (static) or .html (interactive, offline)."),
    kind: str = typer.Option("aggregate", help="aggregate, individual (needs --sample), class (needs --cls) "
                             "or embedding (dimension reduction, one panel per run)."),
    metric: Optional[str] = typer.Option(None, help="Any per-sample metric the runs record (e.g. correct, confidence, "
                                         "entropy, iou, epe), a consensus metric (e.g. consensus_agreement), or, for "
                                         "aggregate and class plots, a dataset-level metric of the task (e.g. "
                                         "class_accuracy, ap50, map, nero_conf_iou; band: bootstrap over samples). "
                                         "Default: correct (or the task's primary metric) for aggregate/class plots, "
                                         "confidence for individual/embedding."),
    sample: Optional[int] = typer.Option(None, help="Sample id for --kind individual."),
    cls: Optional[int] = typer.Option(None, "--cls", help="Class for --kind class."),
    marker: Optional[str] = typer.Option(None, help="Mark an orbit element, e.g. angle=90."),
    method: str = typer.Option("pca", help="Embedding method: pca, ica, isomap, tsne, umap."),
    home: Optional[Path] = HomeOption,
    title: Optional[str] = typer.Option(None, help="Figure title."),
    simultaneous: bool = typer.Option(True, "--simultaneous/--pointwise-only", help="Static aggregate and class "
                                      "plots: also draw the simultaneous band (covers every element at once, "
                                      "dashed), or only the pointwise one."),
) -> None:
    """NERO plots for papers (static) or the web (interactive): every kind, from stored runs."""
    from ..analysis.nero import prepare_aggregate, prepare_individual
    from ..results.store import Store

    store = Store(home, create=False)
    results = [load_orbit_run(store, r) for r in runs]
    if metric is None:
        first = results[0]
        metric = "confidence" if kind in ("individual", "embedding") and "confidence" in first.data else first.primary_metric()
    interactive = output.suffix.lower() in (".html", ".htm")
    mark = _parse_marker(marker)
    if kind == "class" and cls is None:
        raise ValueError("--kind class needs --cls CLASS")
    subset = cls if kind == "class" else None
    if kind == "embedding":
        path = _plot_embeddings(results, metric, method, output, interactive)
    elif kind in ("aggregate", "class") and not interactive:
        from ..viz.plot import nero_plot, save_figure

        figure = nero_plot(results, metric, subset=subset, marker=mark, title=title, simultaneous=simultaneous)
        path = save_figure(figure, output)
    else:
        if kind in ("aggregate", "class"):
            data = prepare_aggregate(results, metric, subset=subset, marker=mark, title=title)
        elif kind == "individual":
            if sample is None:
                raise ValueError("--kind individual needs --sample ID (see the report or `runs show`)")
            data = prepare_individual(results, sample, metric, marker=mark, title=title)
        else:
            raise ValueError(f"unknown --kind {kind!r}: aggregate, individual, class or embedding")
        if interactive:
            from ..viz.interactive import render_plotly

            output.parent.mkdir(parents=True, exist_ok=True)
            render_plotly(data).write_html(output, include_plotlyjs=True)
            path = output
        else:
            from ..viz.plot import render, save_figure

            path = save_figure(render(data), output)
    console.print(f"wrote {path}")


def _plot_embeddings(results: list[Any], metric: str, method: str, output: Path, interactive: bool) -> Path:
    from ..analysis.reduce import embed, orbit_statistic

    figures = []
    for res in results:
        emb = embed(res, metric, method=method)
        colour = orbit_statistic(res, metric, "mean")
        name = res.attrs.get("run_name") or res.attrs.get("model_name")
        figures.append((emb, colour, f"{name}: {emb.label} of orbit vectors of {metric}"))
    if interactive:
        from ..viz.interactive import figure_html
        from ..viz.reduce_plots import scatter_plotly

        body = "".join(figure_html(scatter_plotly(e, c, f"orbit mean of {metric}", t), include_plotlyjs=i == 0)
                       for i, (e, c, t) in enumerate(figures))
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
        return output
    if len(figures) != 1:
        raise ValueError("a static embedding plot shows one run; give one run, or write .html for several")
    from ..viz.plot import save_figure
    from ..viz.reduce_plots import scatter_figure

    (e, c, t), = figures
    return save_figure(scatter_figure(e, c, f"orbit mean of {metric}", t), output)


@app.command()
@friendly_errors
def report(
    runs: list[str] = typer.Argument(..., help="Run ids / prefixes / names to compare (same orbit)."),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="HTML file to write (self-contained)."),
    metric: str = typer.Option("confidence", help="Metric for the non-equivariance score, embeddings and samples."),
    method: str = typer.Option("pca", help="Embedding method: pca, ica, isomap, tsne, umap."),
    home: Optional[Path] = HomeOption,
    title: str = typer.Option("orbitscope report", help="Report title."),
    robustness: Optional[Path] = typer.Option(None, "--robustness", help="Output folder of 'orbitscope robust "
                                              "compare' whose comparison (table and plot) joins the report."),
) -> None:
    """One self-contained HTML report (offline, no CDN) comparing the given runs."""
    from ..viz.report import write_report
    from ..results.store import Store

    sections = []
    if robustness is not None:
        fragment = robustness / "robustness_section.html"
        if not fragment.is_file():
            raise FileNotFoundError(f"{fragment} not found; run 'orbitscope robust compare -o {robustness}' first")
        sections.append(fragment.read_text(encoding="utf-8"))
    store = Store(home, create=False)
    results = [load_orbit_run(store, r) for r in runs]
    path = write_report(results, output, metric=metric, method=method, title=title, extra_sections=sections)
    console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


@app.command()
@friendly_errors
def demo(
    cases: Optional[list[str]] = typer.Argument(None, help="Case studies to run (default: all): mnist, "
                                                "fashion-mnist, ml4ml, detection, piv."),
    home: Optional[Path] = HomeOption,
    out: Path = typer.Option(Path("demo-output"), "--out", help="Folder for figures, summary tables and reports."),
    n: int = typer.Option(500, "--n", help="Held-out images per dataset (a multiple of 10)."),
    ml4ml: bool = typer.Option(True, "--ml4ml/--no-ml4ml", help="Also run ML4ML's assessors on the shipped model study."),
    retrain: bool = typer.Option(False, "--retrain", help="Train the models the store has not cached instead of "
                                 "copying the trained weights orbitscope ships (SHA-256 checked)."),
) -> None:
    """NERO's MNIST case study (and Fashion-MNIST): plain vs augmented vs equivariant CNNs over rotations;
    ML4ML assessors against formula baselines on the shipped 208-model study; NERO's detection case study (our detector at 0 % vs 100 % jitter over
    window shifts, OpenCV's detectors on real photos); NERO's PIV case study (Farneback vs learned flow CNNs
    over D4 x time reversal, and real pairs label-free); NERO's point-cloud case study (PointNet and DGCNN,
    plain vs rotation-augmented, and invariant references, over NERO's SO(3) sample and a uniform grid).
    Name cases to run only those, e.g.
    `orbitscope demo detection`."""
    from ..demos.mnist import DEMO_CASES, run_demo

    known = [c.name for c in DEMO_CASES] + ["ml4ml", "detection", "piv", "pointcloud"]
    unknown = [c for c in cases or [] if c not in known]
    if unknown:
        raise ValueError(f"unknown demo case(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    chosen = tuple(c for c in DEMO_CASES if not cases or c.name in cases)
    ml4ml = ml4ml and (not cases or "ml4ml" in cases)
    detection = not cases or "detection" in cases
    piv = not cases or "piv" in cases
    pointcloud = not cases or "pointcloud" in cases

    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    with progress_bar() as bar:
        state: dict[str, Any] = {}

        def progress(done: int, total: int | None) -> None:
            state["update"](done, total)

        def status(msg: str) -> None:
            bar.console.print(f"• {msg}")
            if msg.startswith("evaluating"):
                state["update"] = engine_progress(bar, msg.split(" on ")[0])

        result = run_demo(home, out, n_test=n, cases=chosen, status=status, progress=progress, ml4ml=ml4ml,
                          shipped=not retrain)
        if detection:
            from ..demos.detection import run_detection_demo

            det = run_detection_demo(home, out / "detection", status=status, progress=progress, shipped=not retrain)
            result.files.update(det.files)
            result.skipped.update({f"detection {k}": v for k, v in det.skipped.items()})
            result.seconds["training"] += det.seconds["training"]
        if piv:
            from ..demos.piv import run_piv_demo

            flow_demo = run_piv_demo(home, out / "piv", status=status, progress=progress, shipped=not retrain)
            result.files.update(flow_demo.files)
            result.skipped.update({f"piv {k}": v for k, v in flow_demo.skipped.items()})
            result.seconds["training"] += flow_demo.seconds["training"]
        if pointcloud:
            from ..demos.pointcloud import run_pointcloud_demo

            cloud_demo = run_pointcloud_demo(home, out / "pointcloud", status=status, progress=progress,
                                             shipped=not retrain)
            result.files.update(cloud_demo.files)
            result.skipped.update({f"pointcloud {k}": v for k, v in cloud_demo.skipped.items()})
            result.seconds["training"] += cloud_demo.seconds["training"]
    for case, runs in result.runs.items():
        console.rule(case)
        _print_summary([r.result for r in runs])
        _print_contrasts([row for row in result.comparisons.get(case, []) if row["metric"] == "correct"])
        for row in result.checks.get(case, []):
            console.print(f"  gate ({'pass' if row['passed'] else 'FAIL'}) {row['model']}: {row['reason']}",
                          highlight=False)
        if result.lee.get(case):
            print_lee_models(result.lee[case])
    for done, case, what, summaries in ((detection, "detection", "", lambda: det.summaries),
                                        (piv, "PIV", " (EPE, px)", lambda: flow_demo.summaries),
                                        (pointcloud, "point clouds", " (accuracy, true-class confidence)",
                                         lambda: cloud_demo.summaries)):
        for part, rows in (summaries().items() if done else ()):
            console.rule(f"{case}: {part}{'' if part.endswith(('contrast', 'lee')) else what}")
            if part.endswith("contrast"):
                _print_contrasts(rows)
            elif part.endswith("lee"):
                print_lee_models(rows)
            else:
                _print_rows(rows)
    if result.ml4ml is not None:
        console.rule(f"ML4ML assessors vs formula baselines ({result.ml4ml.n_models}-model study)")
        console.print(result.ml4ml.cv_table, highlight=False, soft_wrap=True)
        for inv in dict.fromkeys(r["invariance"] for r in result.ml4ml.importances):
            top = [r for r in result.ml4ml.importances if r["invariance"] == inv][:5]
            console.print(f"random forest for {inv}, top features: "
                          + ", ".join(f"{r['feature']} {r['importance']:.3f}" for r in top))
        console.rule("ML4ML verdicts on models outside the study")
        for v in result.ml4ml.verdicts:
            console.print(f"  {v['model']}, {v['invariance']} (trained with {v['trained with']}): {v['verdict']}, "
                          f"p(invariant) = {v['probability invariant']:.2f}")
    for key, path in result.files.items():
        console.print(f"  {key:34s} {path}")
    for case, why in result.skipped.items():
        console.print(f"[yellow]skipped {case}[/]: {why}")
    console.print(f"demo finished in {time.perf_counter() - t0:.1f} s (training {result.seconds['training']:.1f} s)")
    home_arg = f" --home {home}" if home else ""
    reports = [p for k, p in result.files.items() if str(p).endswith("report.html")]
    first = reports[0] if reports else next(iter(result.files.values()), out)
    console.print(f"next: open {first}; [bold]orbitscope runs list{home_arg}[/]; "
                  f"[bold]orbitscope plot RUN_A RUN_B -o fig.pdf{home_arg}[/]")


@app.command("demo-models")
@friendly_errors
def demo_models(
    home: Optional[Path] = HomeOption,
    ship: bool = typer.Option(True, "--ship/--no-ship", help="Copy the trained files, with their SHA-256, into "
                              "orbitscope's shipped weights (src/orbitscope/demos/weights)."),
) -> None:
    """Train every model the demo evaluates from its recipe into the store's model cache (models
    cached there already are kept: use an empty --home to retrain all), then ship them: the demo
    copies shipped weights instead of training. `make models` runs this on an empty store."""
    from ..demos.models import demo_model_files, train_demo_models
    from ..demos.shipped import SHIPPED_WEIGHTS, ship_files
    from ..results.store import Store

    logging.basicConfig(level=logging.WARNING)
    cache = Store(home).home / "models"
    t0 = time.perf_counter()
    seconds = train_demo_models(cache, lambda msg: console.print(f"• {msg}"), shipped=False)
    files = demo_model_files(cache)
    console.print(f"{len(files)} models in {cache} (training {seconds:.1f} s, {time.perf_counter() - t0:.1f} s in all)")
    if ship:
        entries = ship_files(files, "make models (orbitscope demo-models on an empty store)")
        total = sum(e["bytes"] for e in entries.values())
        console.print(f"shipped {len(entries)} files, {total / 1e6:.1f} MB, to {SHIPPED_WEIGHTS}")


@app.command()
@friendly_errors
def serve(
    home: Optional[Path] = HomeOption,
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind; 0.0.0.0 exposes every run in the store "
                             "to the network (a warning is logged)."),
    port: int = typer.Option(8050, "--port", min=1, max=65535, help="TCP port."),
) -> None:
    """The interactive NERO interface in the browser, on the runs of a store.

    The NERO interface at / only reads the store; the labelling view at /label/ records human
    invariance labels in the store's model database, and nothing else is written."""
    from ..app import serve as serve_app
    from ..results.store import Store

    store = Store(home, create=False)  # fail here, with the CLI's message, if there is no store
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    console.print(f"orbitscope interface for {store.home}: open [bold]http://{host}:{port}/[/] (Ctrl-C to stop)")
    serve_app(store.home, host=host, port=port)


# sub-commands defined in their own modules (imported last: they use the helpers above)
from .zoo import assess_command, zoo_app  # noqa: E402

app.add_typer(zoo_app, name="zoo")
app.command("assess")(friendly_errors(assess_command))
from .robust import robust_app  # noqa: E402
app.add_typer(robust_app, name="robust")
from .sweep import sweep_command  # noqa: E402
app.command("sweep")(sweep_command)
from .check import check_command, plan_command  # noqa: E402
app.command("check")(friendly_errors(check_command))
app.command("plan")(friendly_errors(plan_command))
from .lee import lee_command, print_lee_models  # noqa: E402
app.command("lee")(friendly_errors(lee_command))


def main() -> None:  # pragma: no cover - console entry point
    app()

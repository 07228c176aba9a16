"""``orbitscope robust certify | compare``: probabilistic robustness from the command line.

Mounted on the main app by :mod:`orbitscope.cli.commands` (``app.add_typer(robust_app, name="robust")``);
the helpers every command shares come from :mod:`orbitscope.cli.common`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from .common import TrustOption, console, engine_progress, err_console, friendly_errors, parse_normalize
from .common import executor_from_options
from .sweep import AddressOption, ExecutorOption, WorkersOption

__all__ = ["robust_app", "resolve_model"]

robust_app = typer.Typer(
    help="Probabilistic robustness (Mu & Lim): certify inputs with sequential tests, compare models.",
    no_args_is_help=True,
)

HomeOption = typer.Option(None, "--home", help="Store directory, whose models/ caches trained recipes "
                          "(default: $ORBITSCOPE_HOME or ./orbitscope-runs).")


def resolve_model(spec: str, weights: Path | None = None, home: Path | None = None,
                  status: Callable[[str], None] | None = None, trust: bool = False) -> tuple[Any, str]:
    """A model from a recipe name (``plain``, ``uniform``, …, ``pgd``; trained on first use and
    cached in ``<home>/models``) or anything :func:`orbitscope.models.loading.load_user_model` reads.
    Returns ``(model, display name)``."""
    from ..models.loading import load_user_model
    from ..training.recipes import all_recipes
    from ..robust.adversarial import ADVERSARIAL_RECIPES
    from ..robust.compare import reference_models

    if weights is None and (spec in all_recipes() or spec in ADVERSARIAL_RECIPES):
        cache = (home if home is not None else _default_home()) / "models"
        return reference_models(cache, [spec], status=status)[spec], spec
    if os.getcwd() not in sys.path:  # 'mymodule:factory' in the current folder imports, as with python -m
        sys.path.insert(0, os.getcwd())
    name = Path(spec).stem if Path(spec).is_file() else spec.split(":")[-1]
    return load_user_model(spec, weights, trust=trust), name


def _default_home() -> Path:
    from ..results.store import default_home

    return default_home()


def _check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available to this torch build ({torch.__version__}); use cpu")


def _bar() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("inputs"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, transient=False)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def balanced_inputs(data: str, n: int) -> Any:
    """The dataset of spec ``data`` cut to ``n`` inputs with every class equally represented (the
    first ``n // classes`` of each class: the MNIST subset's splits are ordered by class, so the
    first N would be all zeros). A spec with '@N' is taken as given; ``n = 0`` keeps everything."""
    from ..data.datasets import parse_data_spec

    dataset = parse_data_spec(data)
    if "@" in data or n == 0:
        return dataset
    if n < 0:
        raise ValueError(f"--n must be >= 0, got {n}")
    labels = getattr(dataset, "labels", None)
    if labels is None or not hasattr(dataset, "stratified"):
        return parse_data_spec(f"{data}@{n}")
    per_class = max(1, n // len(np.unique(labels)))
    return dataset.stratified(per_class)


@robust_app.command("certify")
@friendly_errors
def certify_command(
    model: str = typer.Option(..., "--model", help="A recipe name (plain, uniform, normal90, p4cnn, pgd, …: trained "
                              "on first use and cached), 'package.module:factory' (with --weights), a TorchScript, "
                              "torch.export or ONNX (.onnx) file, or an orbitscope .safetensors model file."),
    data: str = typer.Option("mnist-subset:test", "--data", help="mnist-subset[:train|test], fashion-mnist[:train|"
                             "test], idx:IMAGES,LABELS, folder:PATH or npz:PATH; '@N' keeps the first N samples."),
    n: int = typer.Option(100, "--n", help="Inputs: N/classes of each class (the first of each), unless --data "
                          "has '@N'; 0 = all."),
    perturbation: str = typer.Option("linf:8/255", "--perturbation", "-p", help="linf:EPS[:8bit], l2:EPS, "
                                     "gaussian:SIGMA, rotation:DEG, shift:PX[:continuous], scale:LO:HI, "
                                     "brightness:LO:HI, products joined by '+' (e.g. rotation:15+scale:0.9:1.1)."),
    test: str = typer.Option("sprt", "--test", help="binomial, published, sprt or confidence-sequence."),
    kappa: float = typer.Option(0.01, "--kappa", help="Tolerated failure probability κ (robust: p(x) < κ)."),
    alpha: float = typer.Option(0.01, "--alpha", help="Error level α of each input's test."),
    budget: Optional[int] = typer.Option(None, "--budget", help="Most perturbations per input (default: the test's; "
                                         "the binomial test always uses exactly this many)."),
    label_free: bool = typer.Option(False, "--label-free", help="Count failures against the clean prediction, "
                                    "not the label."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="safetensors or state-dict file for a factory."),
    normalize: Optional[str] = typer.Option(None, help="Model input normalisation 'MEAN,…/STD,…', applied after the "
                                            "perturbation."),
    batch_size: int = typer.Option(1024, "--batch-size", help="Perturbed images per model call."),
    device: str = typer.Option("cpu", help="Device for sampling and the model, e.g. cpu or cuda."),
    seed: int = typer.Option(0, help="Seed of every perturbation (results are reproducible)."),
    csv: Optional[Path] = typer.Option(None, "--csv", help="Write per-input results (outcome, samples, failures, "
                                       "bound) to this CSV file."),
    executor: Optional[str] = ExecutorOption,
    address: Optional[str] = AddressOption,
    workers: Optional[int] = WorkersOption,
    shard_size: int = typer.Option(64, "--shard-size", help="Inputs per job with --executor (each worker certifies "
                                   "shards of this many consecutive inputs; results equal a local run's)."),
    home: Optional[Path] = HomeOption,
    trust: bool = TrustOption,
) -> None:
    """Certify every input of a dataset: is its failure probability under random perturbations below κ?"""
    from ..robust.certify import certify
    from ..robust.samplers import parse_perturbation

    _check_device(device)
    if shard_size < 1:
        raise ValueError(f"--shard-size must be >= 1 (inputs per job), got {shard_size}")
    runner = executor_from_options(executor, address, workers)
    sampler = parse_perturbation(perturbation)
    dataset = balanced_inputs(data, n)
    net, name = resolve_model(model, weights, home, status=lambda m: err_console.print(f"• {m}"), trust=trust)
    with _bar() as bar:
        t0 = time.perf_counter()
        result = certify(net.to(device), dataset, sampler, test=test, kappa=kappa, alpha=alpha, budget=budget,
                         label_free=label_free, normalize=parse_normalize(normalize), batch_size=batch_size,
                         device=device, seed=seed, progress=engine_progress(bar, f"{name}: {sampler} ({test})"),
                         executor=runner, shard_size=shard_size)
        elapsed = time.perf_counter() - t0
    d = result.dataset
    table = Table(title=f"{name} on {getattr(dataset, 'data_id', data)}: {sampler}, {test} test, κ = {kappa:g}, "
                        f"α = {alpha:g}, at most {result.budget} samples per input")
    table.add_column("quantity", no_wrap=True)
    table.add_column("value", justify="right")
    lines = [
        ("inputs", d["n_inputs"]),
        ("clean accuracy", d["clean_accuracy"]),
        ("certified robust accuracy", d["certified_robust_accuracy"]),
        ("  95% interval", f"[{d['certified_robust_accuracy_lower']:.4g}, {d['certified_robust_accuracy_upper']:.4g}]"),
        ("certified among correct", d["certified_among_correct"]),
        ("certified rate" + (" (prediction-stable)" if label_free else ""), d["certified_rate"]),
        ("not robust", d["not_robust_rate"]),
        ("undecided (budget spent)", d["undecided_rate"]),
        ("E_x[p(x)] estimate (first samples)", d["global_failure_estimate"]),
        ("E_x[p(x)] upper bound (1 − α)", d["global_upper_bound"]),
        ("E_x[p(x)] < κ certified", d["global_certified"]),
        (f"test-set mean p(x) upper bound ({d['tower_m']} per input)", d["test_set_upper_bound"]),
        ("mean perturbations per input", d["mean_samples"]),
        ("model queries", d["queries"]),
        ("seconds", elapsed),
    ]
    for k, v in lines:
        table.add_row(escape(k), escape(_fmt(v)))
    console.print(table)
    if csv is not None:
        console.print(f"wrote {result.to_csv(csv)}")


def _floats(text: str, what: str) -> list[float]:
    if not text.strip():
        return []
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated numbers, e.g. 0.05,0.1,0.2; got {text!r}") from None


@robust_app.command("compare")
@friendly_errors
def compare_command(
    eps: str = typer.Option("0.05,0.1,0.2", "--eps", help="L∞ radii (pixel values in [0, 1]), comma-separated."),
    rotations: str = typer.Option("10,20,30", "--rotations", help="Rotation half-ranges θ in degrees ('' for none)."),
    n: int = typer.Option(200, "--n", help="Inputs: N/classes of each class (the first of each), unless --data has "
                          "'@N'."),
    out: Path = typer.Option(Path("robustness-output"), "-o", "--out", help="Folder for robustness.csv, .png and "
                             "the HTML section."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write a standalone HTML report here."),
    models: str = typer.Option("plain,uniform,pgd", "--models", help="Comma-separated recipe names or model files "
                               "(as for certify --model)."),
    data: str = typer.Option("mnist-subset:test", "--data", help="Dataset spec (as for certify)."),
    tests: str = typer.Option("binomial,published,sprt,confidence-sequence", "--tests", help="Tests to compare."),
    kappa: float = typer.Option(0.01, "--kappa", help="Tolerated failure probability κ."),
    alpha: float = typer.Option(0.01, "--alpha", help="Error level α per input."),
    budget: int = typer.Option(2000, "--budget", help="Most perturbations per input, for every test (the binomial "
                               "test uses exactly this many)."),
    quantize: bool = typer.Option(False, "--8bit", help="Quantise L∞ samples to 8 bits (Mu & Lim's setting)."),
    pgd_steps: int = typer.Option(20, "--pgd-steps", help="PGD iterations (step 2.5·ε/steps, random start)."),
    batch_size: int = typer.Option(1024, "--batch-size", help="Perturbed images per model call."),
    device: str = typer.Option("cpu", help="Device, e.g. cpu or cuda."),
    seed: int = typer.Option(0, help="Seed of every perturbation and PGD start."),
    home: Optional[Path] = HomeOption,
    trust: bool = TrustOption,
) -> None:
    """Clean, PGD and certified probabilistic robust accuracy of several models over ε and rotations."""
    from ..robust.compare import compare_robustness

    _check_device(device)
    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    if report is not None and report.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"--report must be an .html file, got {report.name!r}")
    dataset = balanced_inputs(data, n)
    say = lambda m: err_console.print(f"• {m}")  # noqa: E731
    nets = {}
    for spec in [m.strip() for m in models.split(",") if m.strip()]:
        net, name = resolve_model(spec, None, home, status=say, trust=trust)
        nets[name] = net.to(device)
    t0 = time.perf_counter()
    with _bar() as bar:
        state: dict[str, Any] = {}

        def status(msg: str) -> None:
            if "certifying" in msg:
                state["update"] = engine_progress(bar, msg)
            else:
                bar.console.print(f"• {msg}")

        def progress(done: int, total: int | None) -> None:
            if "update" in state:
                state["update"](done, total)

        comp = compare_robustness(nets, dataset, eps=_floats(eps, "--eps"), rotations=_floats(rotations, "--rotations"),
                                  tests=[t.strip() for t in tests.split(",") if t.strip()], kappa=kappa, alpha=alpha,
                                  budget=budget, quantize=quantize, pgd_steps=pgd_steps, batch_size=batch_size,
                                  seed=seed, data_id=getattr(dataset, "data_id", data), status=status,
                                  progress=progress)
    titles = {"accuracy": f"accuracy on {len(dataset)} inputs: clean, PGD, and certified probabilistic robust "
                          f"accuracy per test (κ = {kappa:g}, α = {alpha:g}, budget {budget})",
              "queries": "mean model queries per input (perturbed samples), per test"}
    for what, title in titles.items():
        head, body = comp.table(what)
        table = Table(title=title)
        for h in head:
            left = h in ("model", "perturbation")
            table.add_column(h, no_wrap=left, justify="left" if left else "right", overflow="fold")
        for row in body:
            table.add_row(*row)
        console.print(table)
    for key, path in comp.save(out).items():
        console.print(f"  {key:14s} {path}")
    if report is not None:
        console.print(f"  {'report':14s} {comp.write_html(report)}")
    console.print(f"compare finished in {time.perf_counter() - t0:.1f} s")

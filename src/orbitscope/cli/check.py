"""``orbitscope check`` (a release gate for CI) and ``orbitscope plan`` (how many samples a check
needs), on :mod:`orbitscope.stats`.

``check`` evaluates a model spec through the store (resumable; a finished identical run is
reused) or reads a stored run, runs :func:`~orbitscope.stats.gate.check_result` on it, prints
each check's verdict and reason, writes JUnit XML / JSON when asked, and exits with

* 0: every check passed;
* 1: a check failed (:attr:`~orbitscope.stats.gate.GateReport.exit_code`);
* 2: bad input (an unknown metric, a missing option, a run that does not exist, …: the
  ``error:`` line of :func:`~orbitscope.cli.common.friendly_errors` says what to do).

Mounted on the main app by :mod:`orbitscope.cli.commands`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from .common import HomeOption, TrustOption, console, err_console, evaluate_spec, load_orbit_run
from ..stats.gate import DEFAULT_MAX_DROP

if TYPE_CHECKING:  # imported lazily at run time to keep CLI start-up short
    from ..results.result import OrbitResult
    from ..stats.gate import GateReport

__all__ = ["check_command", "plan_command", "SubjectOptions", "stored_run", "evaluate_subject",
           "orbit_elements_tested", "print_report"]


@dataclass(frozen=True)
class SubjectOptions:
    """Where and how ``check`` evaluates the model specs it is given (the model's and the
    baseline's): the ``--data``, ``--orbit``, ``--task``, ``--normalize``, ``--batch-size``,
    ``--home`` and ``--trust`` options."""

    data: str | None
    orbit: str | None
    task_kind: str | None
    normalize: str | None
    batch_size: int
    home: Path | None
    trust: bool
    device: str = "cpu"
    view_size: int | None = None


def stored_run(ref: str, home: Path | None, role: str) -> "OrbitResult | None":
    """The stored run ``ref`` names (a run id, unique id prefix or run name in the store at
    ``home``), or None when ``ref`` is a model spec: a model file, or a
    ``'package.module:factory'`` that is not also a run's name.

    Raises:
        StoreError: ``ref`` is neither (the message, naming it as ``role``, says what it may be);
            the run is not complete.
    """
    from ..errors import StoreError
    from ..results.store import Store

    if Path(ref).is_file():
        return None
    try:
        store = Store(home, create=False)
        record = store.get_run(ref)
    except StoreError as exc:
        if ":" in ref:
            return None
        why = "a folder" if Path(ref).is_dir() else "no such file"
        raise StoreError(f"{role} {ref!r} is not a model file ({why}), not a 'package.module:factory' spec, and not "
                         f"a stored run: {exc}") from None
    result = load_orbit_run(store, record.run_id)
    console.print(f"run [bold]{escape(record.run_id)}[/] ({escape(ref)}, from the store)")
    return result


def evaluate_subject(ref: str, weights: Path | None, options: SubjectOptions, role: str) -> "OrbitResult":
    """The model spec ``ref`` (``MODEL`` or ``--baseline``, named ``role`` in errors) evaluated
    on ``options.data`` over ``options.orbit`` through the store (a finished identical run is
    reused).

    Raises:
        ValueError: ``--data`` or ``--orbit`` is missing.
    """
    missing = [opt for opt, value in (("--data", options.data), ("--orbit", options.orbit)) if value is None]
    if missing or options.data is None or options.orbit is None:
        raise ValueError(f"{role} {ref!r} is a model spec: give {' and '.join(missing)} to evaluate it on (e.g. "
                         "--data mnist-subset:test --orbit rotation:-30:30:5), or name a stored run "
                         "(`orbitscope runs list` shows them)")
    run = evaluate_spec(ref, options.data, options.orbit, task_kind=options.task_kind or "classification",
                        weights=weights, home=options.home, batch_size=options.batch_size,
                        normalize=options.normalize, trust=options.trust, device=options.device,
                        view_size=options.view_size)
    return run.result


def print_report(report: "GateReport", mode: str) -> None:
    """The gate's verdict, then each check's verdict and reason (the content of
    :meth:`~orbitscope.stats.gate.GateReport.summary`, in colour)."""
    verdict = "[bold green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
    console.print(f"{verdict} {escape(report.model)}", highlight=False)
    for check in report.checks:
        mark = "[green]pass[/]" if check.passed else "[red]FAIL[/]"
        console.print(f"  {mark} {check.name}: {escape(check.reason)}", soft_wrap=True, highlight=False)
    if report.passed and mode == "evidence":
        console.print("[dim]evidence mode: a pass means no drop beyond the tolerance was shown; `orbitscope plan` "
                      "says how many samples detect a given drop (or use --mode equivalence)[/]", soft_wrap=True)


def require_finite(*options: tuple[str, float | None]) -> None:
    """Refuse a non-finite value (``inf``, ``nan``) of any of the ``(option, value)`` pairs (None: not
    given): a gate whose tolerance is infinite can never fail, and NaN compares false with everything.

    Raises:
        ValueError: one line naming the first such option.
    """
    for option, value in options:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{option} must be a finite number, got {value!r}: a threshold of inf or nan would make "
                             "the check meaningless (it could never fail, or never pass)")


def require_non_negative(*options: tuple[str, float | None]) -> None:
    """Refuse a negative tolerance among the ``(option, value)`` pairs (None: not given).

    Raises:
        ValueError: one line naming the first such option.
    """
    for option, value in options:
        if value is not None and value < 0:
            raise ValueError(f"{option} is a tolerance (the largest allowed drop, in metric units), so it must be "
                             f">= 0, e.g. 0.02; got {value:g}")


def check_command(
    model: str = typer.Argument(..., help="The model to check: a model spec as `orbitscope evaluate --model` takes "
                                "it ('package.module:factory' with --weights, or a model file; evaluated on --data "
                                "over --orbit), or a run id / unique id prefix / run name in the store."),
    data: Optional[str] = typer.Option(None, "--data", help="Data spec for model specs (see `orbitscope evaluate "
                                       "--help`), e.g. mnist-subset:test@500."),
    orbit: Optional[str] = typer.Option(None, "--orbit", help="Orbit spec for model specs, e.g. rotation:-30:30:5, "
                                        "rotation90, d4."),
    task_kind: Optional[str] = typer.Option(None, "--task", help="For model specs: classification (default), "
                                            "detection, flow or pointcloud."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="safetensors or state-dict file for a factory "
                                           "MODEL."),
    normalize: Optional[str] = typer.Option(None, help="For model specs: input normalisation 'MEAN,…/STD,…', "
                                            "applied after the transform."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Adds a regression check against this model: "
                                           "a stored run, or a model spec evaluated on the same --data and --orbit."),
    baseline_weights: Optional[Path] = typer.Option(None, "--baseline-weights", help="Weights for a factory "
                                                    "--baseline."),
    max_drop: float = typer.Option(DEFAULT_MAX_DROP, "--max-drop", help="Largest allowed drop of the "
                                   "metric from the identity at any orbit element (metric units, e.g. 0.02 "
                                   "accuracy)."),
    invariance: bool = typer.Option(True, "--invariance/--no-invariance", help="Check the drop from the identity "
                                    "(--no-invariance with --baseline: the regression check only)."),
    max_regression: Optional[float] = typer.Option(None, "--max-regression", help="Largest allowed drop "
                                                   "below the baseline at any element (default: --max-drop)."),
    alpha: float = typer.Option(0.05, "--alpha", help="Family-wise error of each check (over all orbit elements "
                                "together), in (0, 1)."),
    metric: Optional[str] = typer.Option(None, "--metric", help="Metric to check (default: the task's primary "
                                         "metric, accuracy for classification)."),
    mode: str = typer.Option("evidence", "--mode", help="evidence: fail when a drop beyond the tolerance is shown; "
                             "equivalence: pass only when every drop is shown within it (needs more samples)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write the checks as JUnit XML (one test case "
                                         "per check) to this file."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the report as JSON to this file."),
    home: Optional[Path] = HomeOption,
    batch_size: int = typer.Option(256, "--batch-size", min=1, help="Samples per chunk (unit of storage and "
                                   "resumption) for model specs."),
    trust: bool = TrustOption,
    device: str = typer.Option("cpu", "--device", help="For model specs: where to evaluate, e.g. cpu or cuda."),
    view_size: Optional[int] = typer.Option(None, "--view-size", help="Detection model specs: the square field of "
                                            "view (pixels) a window-shift orbit moves over each image."),
) -> None:
    """Gate a model on its invariance over an orbit, and optionally on not regressing against a
    baseline, with simultaneous error control over every orbit element.

    Exit status 0 when every check passes, 1 when one fails, 2 on bad input."""
    from ..stats.gate import MODES, check_result

    require_finite(("--max-drop", max_drop), ("--max-regression", max_regression), ("--alpha", alpha))
    require_non_negative(("--max-drop", max_drop), ("--max-regression", max_regression))
    if mode not in MODES:
        raise ValueError(f"--mode {mode!r}: choose {' or '.join(MODES)}")
    if not 0 < alpha < 1:
        raise ValueError(f"--alpha must be in (0, 1), e.g. 0.05; got {alpha:g}")
    if baseline is None and (baseline_weights is not None or max_regression is not None):
        raise ValueError("--baseline-weights and --max-regression are for a regression check: add "
                         "--baseline RUN_OR_MODEL")
    model_run = stored_run(model, home, "MODEL")
    base_run = None if baseline is None else stored_run(baseline, home, "--baseline")
    for ref, run, option, value in ((model, model_run, "--weights", weights),
                                    (baseline, base_run, "--baseline-weights", baseline_weights)):
        if run is not None and value is not None:
            raise ValueError(f"{option} is for a 'package.module:factory' model, but {ref!r} is a stored run (its "
                             "weights are fixed): drop it")
    given = [opt for opt, value in (("--data", data), ("--orbit", orbit), ("--task", task_kind),
                                    ("--normalize", normalize)) if value is not None]
    if given and model_run is not None and (baseline is None or base_run is not None):
        runs = "MODEL and --baseline are stored runs (their" if baseline else "MODEL is a stored run (its"
        raise ValueError(f"{', '.join(given)}: {'these say' if len(given) > 1 else 'this says'} how to evaluate a "
                         f"model spec, but {runs} data and orbit are fixed): drop {'them' if len(given) > 1 else 'it'}")
    if not invariance and baseline is None:
        raise ValueError("--no-invariance leaves nothing to check: add --baseline RUN_OR_MODEL for a regression check")
    options = SubjectOptions(data=data, orbit=orbit, task_kind=task_kind, normalize=normalize, batch_size=batch_size,
                             home=home, trust=trust, device=device, view_size=view_size)
    result = model_run if model_run is not None else evaluate_subject(model, weights, options, "MODEL")
    base = base_run
    if baseline is not None and base_run is None:
        base = evaluate_subject(baseline, baseline_weights, options, "--baseline")
    if base is not None:
        from ..results.result import check_same_orbit, check_same_samples

        try:
            check_same_orbit(result, base)
            check_same_samples([result, base])
        except ValueError as exc:
            raise ValueError(f"--baseline {baseline!r} cannot be compared with MODEL {model!r}: {exc}") from None
    report = check_result(result, max_drop=max_drop if invariance else None, alpha=alpha, baseline=base,
                          max_regression=max_regression if max_regression is not None else max_drop,
                          metric=metric, mode=mode)
    print_report(report, mode)
    for path, text in ((junit, report.to_junit), (json_path, report.to_json)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text(), encoding="utf-8")
            console.print(f"[dim]wrote {escape(str(path))}[/]")
    if not report.passed:
        raise typer.Exit(report.exit_code)


def orbit_elements_tested(orbit: str) -> int:
    """K, the elements a check tests on the orbit spec ``orbit``: its distinct elements less the
    reference's (the identity, or the first element; 0° and 360° count once)."""
    from ..group.parse import parse_orbit
    from ..stats.planning import tested_elements

    return tested_elements(parse_orbit(orbit))


def plan_command(
    delta: float = typer.Option(..., "--delta", help="The true drop to detect, in metric units (e.g. 0.05 accuracy)."),
    elements: Optional[int] = typer.Option(None, "--elements", min=1, help="K, the orbit elements tested besides "
                                           "the identity (or give --orbit)."),
    orbit: Optional[str] = typer.Option(None, "--orbit", help="The orbit spec the check will run on (K = its size "
                                        "less the identity), e.g. rotation:0:360:5."),
    accuracy: Optional[float] = typer.Option(None, "--accuracy", help="For accuracy: the expected accuracy at the "
                                             "identity (σ assuming uncorrelated outcomes; conservative)."),
    sd: Optional[float] = typer.Option(None, "--sd", help="For any metric: the standard deviation of one sample's "
                                       "drop from the identity."),
    pilot: Optional[str] = typer.Option(None, "--pilot", help="A stored pilot run (id, prefix or name): σ and K are "
                                        "measured on it."),
    max_drop: float = typer.Option(DEFAULT_MAX_DROP, "--max-drop", help="The tolerance `orbitscope check --max-drop` "
                                   "will allow."),
    alpha: float = typer.Option(0.05, "--alpha", help="Family-wise error of the check."),
    power: float = typer.Option(0.8, "--power", help="Probability of detecting the drop."),
    metric: Optional[str] = typer.Option(None, "--metric", help="With --pilot: the metric (default: the run's "
                                         "primary metric)."),
    simulate: bool = typer.Option(False, "--simulate", help="Also estimate the power at the planned n by simulating "
                                  "the check on synthetic correlated orbits (accuracy plans only)."),
    rho: Optional[float] = typer.Option(None, "--rho", help="With --simulate: AR(1) correlation between neighbouring "
                                        "elements' outcomes (default 0.5)."),
    repetitions: Optional[int] = typer.Option(None, "--repetitions", min=1, help="With --simulate: synthetic orbits "
                                              "(default 200; the Monte-Carlo error shrinks as 1/√repetitions)."),
    home: Optional[Path] = HomeOption,
) -> None:
    """How many samples `orbitscope check` needs to detect a drop of --delta at any orbit element."""
    from ..stats.planning import plan_from_pilot, plan_samples, simulate_power

    require_finite(("--delta", delta), ("--accuracy", accuracy), ("--sd", sd), ("--max-drop", max_drop),
                   ("--alpha", alpha), ("--power", power), ("--rho", rho))
    require_non_negative(("--max-drop", max_drop))
    if sum(x is not None for x in (accuracy, sd, pilot)) != 1:
        raise ValueError("give exactly one of --accuracy P (the accuracy at the identity), --sd S (the standard "
                         "deviation of one sample's drop, any metric) or --pilot RUN (σ measured on a stored run)")
    if metric is not None and pilot is None:
        raise ValueError("--metric chooses the metric of a --pilot run; --accuracy and --sd plans need no metric")
    if not simulate and (rho is not None or repetitions is not None):
        raise ValueError("--rho and --repetitions set up --simulate: add --simulate")
    if simulate and accuracy is None:
        raise ValueError("--simulate simulates 0/1 outcomes at a given identity accuracy: it needs --accuracy P "
                         "(there is no simulation for --sd or --pilot plans)")
    if pilot is not None:
        if elements is not None or orbit is not None:
            raise ValueError("--elements / --orbit: the --pilot run's orbit sets K; drop them")
        from ..results.store import Store

        result = Store(home, create=False).load(pilot)
        plan = plan_from_pilot(result, delta, metric=metric, alpha=alpha, power=power, max_drop=max_drop)
    else:
        if (elements is None) == (orbit is None):
            raise ValueError("give either --elements K (the orbit elements tested besides the identity) or "
                             "--orbit SPEC")
        k = elements if elements is not None else orbit_elements_tested(orbit)  # type: ignore[arg-type]
        plan = plan_samples(delta, elements=k, alpha=alpha, power=power, max_drop=max_drop, accuracy=accuracy, sd=sd)
    console.print(plan.sentence(), soft_wrap=True, highlight=False)
    if simulate:
        assert accuracy is not None
        r = 0.5 if rho is None else rho
        reps = 200 if repetitions is None else repetitions
        with err_console.status(f"simulating the check on {reps} synthetic orbits of {plan.n} samples"):
            estimate = simulate_power(plan.n, delta, elements=plan.elements, accuracy=accuracy, max_drop=max_drop,
                                      alpha=alpha, rho=r, repetitions=reps)
        console.print(f"at n = {plan.n}: {estimate.sentence()}, the drop at one element, AR(1) correlation ρ = {r:g} "
                      "between neighbouring elements", soft_wrap=True, highlight=False)

"""What every ``orbitscope`` sub-command shares: consoles, the store option, one-line errors,
progress bars, small option parsers, and the evaluation of a model spec through the store
(:func:`evaluate_spec`, behind ``orbitscope evaluate`` and ``orbitscope check``)."""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..errors import OrbitscopeError

if TYPE_CHECKING:  # imported lazily at run time to keep CLI start-up short
    from ..engine.evaluation import Run

__all__ = ["console", "executor_from_options", "err_console", "HomeOption", "TrustOption", "InterpolationOption", "PaddingOption", "USER_ERRORS", "friendly_errors", "progress_bar",
           "engine_progress", "parse_normalize", "evaluate_spec"]

console = Console()
err_console = Console(stderr=True)

#: the resampling options shared by the commands that act on images (`evaluate`, `lee`)
InterpolationOption = typer.Option("bilinear", help="bilinear, nearest or bicubic.")
PaddingOption = typer.Option("zeros", help="zeros, border or reflection.")
HomeOption = typer.Option(None, "--home", help="Store directory (default: $ORBITSCOPE_HOME or ./orbitscope-runs).")

TrustOption = typer.Option(False, "--trust", help="Load files that are programs (TorchScript archives, assessor bundles "
                           "not saved by you): they run code chosen by whoever wrote them.")

#: What the CLI reports as a one-line error (exit status 2): orbitscope's own errors, invalid values
#: (ValueError), and files or user modules that cannot be found or read. Anything else is a bug
#: and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    OrbitscopeError, ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
    ImportError,
)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the errors in :data:`USER_ERRORS` into ``error: <message>`` and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            # soft_wrap: one message is one line also when stderr is a pipe (no newlines inserted at 80 columns)
            err_console.print("[bold red]error:[/] " + escape(str(exc)), emoji=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def progress_bar() -> Progress:
    """A rich progress bar on stderr (samples done / total, elapsed and remaining time)."""
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("samples"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, transient=False,
    )


def engine_progress(bar: Progress, description: str) -> Callable[[int, int | None], None]:
    """A ``progress(done, total)`` callback for :func:`orbitscope.evaluate` that drives ``bar``."""
    task = bar.add_task(description, total=None)

    def update(done: int, total: int | None) -> None:
        bar.update(task, completed=done, total=total)

    return update


def parse_normalize(text: str | None) -> tuple[list[float], list[float]] | None:
    """``'MEAN[,MEAN…]/STD[,STD…]'`` -> (means, stds); None for an empty option."""
    if not text:
        return None
    try:
        mean, std = text.split("/")
        return [float(v) for v in mean.split(",")], [float(v) for v in std.split(",")]
    except ValueError:
        raise ValueError(f"--normalize must look like 'MEAN[,MEAN…]/STD[,STD…]', e.g. '0.1307/0.3081'; got {text!r}") from None


def parse_optimize(value: str) -> bool | str:
    """``--optimize auto|on|off`` -> evaluate's ``optimize`` ("auto", True, False)."""
    choices = {"auto": "auto", "on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}
    key = str(value).strip().lower()
    if key not in choices:
        raise ValueError(f"--optimize {value!r}: use auto (the default), on or off")
    return choices[key]


def evaluate_spec(
    model: str,
    data: str,
    orbit: str,
    *,
    task_kind: str = "classification",
    weights: Path | None = None,
    home: Path | None = None,
    name: str | None = None,
    batch_size: int = 256,
    normalize: str | None = None,
    device: str = "cpu",
    optimize: bool | str = "auto",
    precision: str = "float32",
    compile_model: bool = False,
    interpolation: str = "bilinear",
    padding: str = "zeros",
    probabilities: bool = False,
    consensus: bool = False,
    view_size: int | None = None,
    key_objects: bool = True,
    score_threshold: float = 0.5,
    margin: int | None = None,
    max_objects: int | None = None,
    store_inputs: bool = False,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    allow_large: bool = False,
    trust: bool = False,
    force: bool = False,
) -> "Run":
    """Evaluate the model spec ``model`` (``'package.module:factory'`` with optional ``weights``,
    or a model file) on the data spec ``data`` over the orbit spec ``orbit``, through the store
    at ``home`` (resumable; a finished identical run is reused unless ``force``), with a progress
    bar on stderr and one line naming the run.

    Every argument is the ``orbitscope evaluate`` option of the same name (``task_kind`` is
    ``--task``, ``allow_large`` is ``--yes``); errors name those options. Returns the engine's
    :class:`~orbitscope.engine.evaluation.Run` (``run.store`` is the store).
    """
    from ..data.datasets import parse_data_spec
    from ..engine.evaluation import evaluate as run_evaluate
    from ..group.parse import parse_orbit
    from ..models.loading import load_user_model
    from ..results.store import Store
    from ..tasks.setup import task_and_data

    import torch

    try:
        torch.device(device)
    except RuntimeError:
        raise ValueError(f"--device {device!r}: unknown device; use cpu, cuda, cuda:N or mps") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available to this torch build ({torch.__version__}); use cpu")
    orb = parse_orbit(orbit)
    dataset = parse_data_spec(data)
    job_task, dataset, view = task_and_data(task_kind, dataset, orb, view_size, key_objects, score_threshold,
                                             probabilities, margin, max_objects)
    if os.getcwd() not in sys.path:  # 'mymodule:factory' in the current folder imports, as with python -m
        sys.path.insert(0, os.getcwd())
    net = load_user_model(model, weights, trust=trust)
    store = Store(home)
    runner = executor_from_options(executor, address, 2 if executor == "process" and workers is None else workers)
    with progress_bar() as bar:
        t0 = time.perf_counter()
        run = run_evaluate(
            net, dataset, orb, job_task, store=store, name=name, view_size=view, store_inputs=store_inputs or None,
            model_name=Path(model).stem if Path(model).is_file() else model.split(":")[-1],
            batch_size=batch_size, normalize=parse_normalize(normalize), device=device, optimize=optimize,
            precision=precision, compile=compile_model, interpolation=interpolation, padding=padding, resume=not force, consensus=consensus, executor=runner,
            allow_large=allow_large,
            progress=engine_progress(bar, f"{len(dataset)} samples × {orb.size} elements"),
        )
        elapsed = time.perf_counter() - t0
    console.print(f"run [bold]{run.run_id}[/] {'(reused from the store)' if run.reused else f'done in {elapsed:.1f} s'} "
                  f"→ {store.home}")
    return run


def load_orbit_run(store: Any, ref: str) -> Any:
    """The orbit evaluation stored as ``ref`` (id, id prefix or name) in ``store``; a SpecError
    that says where to look when ``ref`` is a Lie-derivative (LEE) run instead."""
    from ..errors import SpecError
    from ..lie.run import is_lee_run

    rec = store.get_run(ref)
    if is_lee_run(rec):
        raise SpecError(f"run {rec.run_id} ({rec.name}) is a Lie-derivative (LEE) run, not an orbit evaluation: "
                        f"`orbitscope runs show {rec.run_id}` prints its table, and `orbitscope serve` shows it at /lee/")
    return store.load(rec.run_id)


def executor_from_options(executor: str | None, address: str | None, workers: int | None,
                          defaults: dict[str, Any] | None = None) -> Any:
    """The executor the ``--executor/--address/--workers`` options name (None: local)."""
    from ..engine.executors import EXECUTORS, get_executor

    if executor is None:
        if address is not None:
            raise ValueError("--address names a Ray cluster: add --executor ray")
        return None
    if executor not in EXECUTORS:
        raise ValueError(f"--executor {executor!r}: choose one of {', '.join(EXECUTORS.names())}")
    options = dict(defaults or {})
    if executor == "ray":
        if address is not None:
            options["address"] = address
        if workers is not None:
            options["workers"] = workers
    elif executor == "process":
        if address is not None:
            raise ValueError("--address is for --executor ray")
        if workers is not None:
            options["workers"] = workers
    elif address is not None or workers is not None:
        raise ValueError(f"--address and --workers are for --executor process or ray, not {executor}")
    return get_executor(executor, **options)

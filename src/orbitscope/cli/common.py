"""What every ``orbitscope`` sub-command shares: consoles, the store option, one-line errors,
progress bars and small option parsers."""

from __future__ import annotations

import functools
from typing import Any, Callable

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..errors import OrbitscopeError

__all__ = ["console", "err_console", "HomeOption", "TrustOption", "USER_ERRORS", "friendly_errors", "progress_bar",
           "engine_progress", "parse_normalize"]

console = Console()
err_console = Console(stderr=True)

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
            err_console.print("[bold red]error:[/] " + escape(str(exc)), emoji=False)
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

"""The fields of a sweep file, checked one by one before anything loads (see
:mod:`orbitscope.engine.sweep_file`): each wrong field is refused with a
:class:`~orbitscope.errors.SpecError` of one line naming the file, the entry and the field, and
quoting the value through :func:`~orbitscope.safe_repr.short_repr` (bounded, whatever its size)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from itertools import islice
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, get_args

from ..errors import OrbitscopeError, SpecError
from ..safe_repr import short_repr, short_text

__all__ = ["TOP_KEYS", "RunEntry", "check_keys", "check_options", "check_run_options", "check_model_entry",
           "check_task", "check_run_entry", "spec_string", "entries", "naming", "task_label"]

#: The keys of a sweep file.
TOP_KEYS = frozenset({"store", "executor", "executor_options", "defaults", "models", "data", "orbits", "tasks",
                      "runs", "name"})
_MODEL = {"name", "path", "factory", "weights", "kwargs", "normalize"}
_RUN = {"model", "data", "orbit", "task", "options", "name"}
_TASK = {"kind", "view_size", "key_objects", "score_threshold", "probabilities", "margin", "max_objects"}
Rules = dict[str, tuple[Callable[[Any], bool], str]]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return _is_int(v) or isinstance(v, float) and math.isfinite(v)


def _is_normalize(v: Any) -> bool:
    return (isinstance(v, list) and len(v) == 2 and all(isinstance(x, list) and x and all(map(_is_number, x)) for x in v)
            and all(s > 0 for s in v[1]))


def _option_rules() -> Rules:
    """evaluate()'s options a sweep file may set, each with its check and what it must be."""
    from ..kinds.image import Interpolation, Padding
    from .optimization import PRECISIONS

    def one_of(*choices: str) -> tuple[Callable[[Any], bool], str]:
        return (lambda v: isinstance(v, str) and v in choices), ", ".join(choices[:-1]) + " or " + choices[-1]

    flag = (lambda v: isinstance(v, bool), "true or false")
    return {
        "batch_size": (lambda v: _is_int(v) and v >= 1, "a positive integer (samples per chunk), e.g. 64"),
        "forward_batch": (lambda v: _is_int(v) and v >= 1, "a positive integer (rows per model call)"),
        "memory_budget_mb": (lambda v: _is_number(v) and v > 0, "a positive number of megabytes"),
        "device": (lambda v: isinstance(v, str) and v.strip() != "", "a device: 'cpu', 'cuda', 'cuda:N' or 'mps'"),
        "normalize": (_is_normalize, "[[means…], [stds…]] (two lists of numbers, the stds above 0)"),
        "interpolation": one_of(*get_args(Interpolation)),
        "padding": one_of(*get_args(Padding)),
        "optimize": (lambda v: v == "auto" or isinstance(v, bool), "'auto', true or false"),
        "precision": one_of(*PRECISIONS),
        "seed": (lambda v: _is_int(v) and -(2**63) <= v < 2**63, "an integer"),
        "store_inputs": flag, "consensus": flag, "allow_large": flag,
        "activations": (lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v),
                        "a list of layer names, e.g. ['conv1', 'fc']"),
    }


_TASK_RULES: Rules = {
    "view_size": (lambda v: _is_int(v) and v >= 1, "a positive integer (pixels)"),
    "key_objects": (lambda v: isinstance(v, bool), "true or false"),
    "score_threshold": (_is_number, "a number"),
    "probabilities": (lambda v: isinstance(v, bool), "true or false"),
    "margin": (lambda v: _is_int(v) and v >= 0, "an integer of pixels, at least 0"),
    "max_objects": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
}


def _key_text(key: Any) -> str:
    return short_text(key, 60) if isinstance(key, str) else short_repr(key, 60)


def check_keys(table: Any, allowed: set[str] | frozenset[str], where: str) -> dict[str, Any]:
    """``table`` when it is a table of ``allowed`` keys only; else a SpecError naming ``where``."""
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table of keys ({', '.join(sorted(allowed))}), got {short_repr(table, 80)}")
    unknown = sorted(_key_text(k) for k in table if k not in allowed)
    if unknown:
        hint = ""
        if set(unknown) & TOP_KEYS and allowed is not TOP_KEYS:
            hint = " (in TOML, plain keys such as data and orbits go before the first [table] or [[table]])"
        shown = ", ".join(unknown[:10]) + (f", … ({len(unknown)} in all)" if len(unknown) > 10 else "")
        raise SpecError(f"{where}: unknown key(s) {shown}; allowed: {', '.join(sorted(allowed))}{hint}")
    return table


def _check_fields(table: dict[str, Any], rules: Rules, where: str) -> None:
    for key, value in table.items():
        check, what = rules[key]
        if not check(value):
            raise SpecError(f"{where}: {key} must be {what}, got {short_repr(value, 80)}")


def check_run_options(opts: dict[str, Any], where: str) -> None:
    """The checks between evaluate() options (optimize and precision) and of the device, on the
    options one run gets (its own over the file's defaults)."""
    from .optimization import check_optimize_options

    try:
        check_optimize_options(opts.get("optimize", "auto"), opts.get("precision", "float32"), False)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    if "device" in opts:
        import torch

        try:
            device = torch.device(opts["device"])
        except (RuntimeError, ValueError):
            raise SpecError(f"{where}: device {short_repr(opts['device'], 40)} is unknown; use 'cpu', 'cuda', "
                            "'cuda:N' or 'mps'") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise SpecError(f"{where}: device {short_repr(opts['device'], 40)}: CUDA is not available to this torch "
                            "build; use 'cpu'")


def check_options(table: Any, where: str) -> dict[str, Any]:
    """A table of evaluate() options (``[defaults]``, a run's ``options``), each checked; ``normalize``
    becomes (means, stds). None is no options."""
    if table is None:
        return {}
    rules = _option_rules()
    opts = dict(check_keys(table, set(rules), where))
    _check_fields(opts, rules, where)
    if "normalize" in opts:
        opts["normalize"] = (list(opts["normalize"][0]), list(opts["normalize"][1]))
    check_run_options(opts, where)
    return opts


@contextmanager
def naming(where: str) -> Iterator[None]:
    """Errors of loading a model, opening data or parsing an orbit, with ``where`` (file, entry,
    field) before their message: the same error when it has one message, else a SpecError."""
    try:
        yield
    except (OrbitscopeError, ValueError, TypeError, AttributeError, LookupError, OSError, ImportError) as exc:
        text = f"{where}: {short_text(str(exc))}"
        if isinstance(exc, (ImportError, OSError)):  # the same kind of error (FileNotFoundError, …), named
            raise (ImportError if isinstance(exc, ImportError) else type(exc))(text) from exc
        if isinstance(exc, OrbitscopeError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
            exc.args = (text,)  # the same error (ModelError, DataError, …: their str() is args[0]), named
            raise
        raise SpecError(text) from exc


def check_model_entry(entry: Any, k: int, p: Path, names: set[str]) -> tuple[str, dict[str, Any], str]:
    """The ``k``-th [[models]] entry of file ``p`` checked, not loaded (``names``: those before it).

    Returns:
        Its name, the entry, and how messages name it (file, entry number and model name).
    """
    where = f"{p}: [[models]] entry {k}"
    entry = check_keys(entry, _MODEL, where)
    name = entry.get("name")
    if name is None or name == "":
        raise SpecError(f"{where}: every model needs a name (name = \"…\")")
    if not isinstance(name, str):
        raise SpecError(f"{where}: model names are strings: write name = \"{_key_text(name)}\", not "
                        f"{short_repr(name, 60)}")
    if name in names:
        raise SpecError(f"{p}: model {short_repr(name, 60)} is named twice")
    where = f"{where} ({short_repr(name, 60)})"
    path, factory, weights, kwargs = (entry.get(key) for key in ("path", "factory", "weights", "kwargs"))
    if (path is None) == (factory is None):
        raise SpecError(f"{where}: give either path (a model file) or factory ('package.module:function')")
    if path is not None and not (isinstance(path, str) and path):
        raise SpecError(f"{where}: path must be a model file (a string, relative to the sweep file's folder), "
                        f"got {short_repr(path, 80)}")
    if factory is not None and not (isinstance(factory, str) and ":" in factory):
        raise SpecError(f"{where}: factory must be 'package.module:function' (a string), got {short_repr(factory, 80)}")
    if weights is not None:
        if path is not None:
            raise SpecError(f"{where}: weights go with a factory; a model file holds its own")
        if not (isinstance(weights, str) and weights):
            raise SpecError(f"{where}: weights must be a weights file (a string, relative to the sweep file's folder), "
                            f"got {short_repr(weights, 80)}")
    if kwargs is not None and not (isinstance(kwargs, dict) and all(isinstance(key, str) for key in kwargs)):
        raise SpecError(f"{where}: kwargs must be a table of keyword arguments, got {short_repr(kwargs, 80)}")
    if entry.get("normalize") is not None:
        check_options({"normalize": entry["normalize"]}, where)
    return name, entry, where


def check_task(entry: Any, where: str) -> tuple[str, dict[str, Any]]:
    """A task entry (a kind, or a table of kind and options) checked: (kind, options)."""
    from ..tasks.setup import TASK_KINDS

    if isinstance(entry, str):
        kind, table = entry, {}
    elif isinstance(entry, dict):
        table = dict(check_keys(entry, _TASK, where))
        kind = table.pop("kind", None)
        if not isinstance(kind, str):
            raise SpecError(f"{where}: a task table needs kind = 'classification' | 'detection' | 'flow' | "
                            f"'pointcloud', got kind = {short_repr(kind, 60)}")
        _check_fields(table, _TASK_RULES, where)
    else:
        raise SpecError(f"{where}: a task is a name ('classification') or a table (kind = …, options), got "
                        f"{short_repr(entry, 80)}")
    if kind not in TASK_KINDS:
        raise SpecError(f"{where}: task {short_repr(kind, 60)} is unknown; choose {', '.join(TASK_KINDS)}")
    return kind, table


def task_label(kind: str, opts: dict[str, Any]) -> str:
    """How tables name a task: its kind, then its options (``detection,view_size=128``)."""
    return kind + "".join(f",{k}={v}" for k, v in sorted(opts.items()))


def spec_string(value: Any, what: str, where: str) -> str:
    """``value`` when it is a non-empty spec string; ``what`` is ``"data"`` or ``"orbit"``."""
    if not (isinstance(value, str) and value.strip()):
        example = {"data": "a data spec string such as 'mnist-subset:test@200'",
                   "orbit": "an orbit spec string such as 'rotation:0:360:30'"}[what]
        raise SpecError(f"{where}: must be {example}, got {short_repr(value, 80)}")
    return value


def entries(raw: dict[str, Any], key: str, p: Path) -> list[Any]:
    """The list under ``key`` of file ``p`` (a single string or table is a list of one)."""
    value = raw.get(key, [])
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list):
        raise SpecError(f"{p}: {key} must be a list, got {short_repr(value, 80)}")
    return value


@dataclass
class RunEntry:
    """One run of a sweep file, checked: the model's name, the data and orbit specs and the task
    (kind, options), each with how messages name it, the run's own options and name."""

    model: str
    data: str
    orbit: str
    task: tuple[str, dict[str, Any]]
    options: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    data_where: str = ""
    orbit_where: str = ""
    task_where: str = ""


def check_run_entry(entry: Any, where: str, model_names: Collection[str], defaults: dict[str, Any]) -> RunEntry:
    """A [[runs]] entry checked (``where``: file and entry number) against the models' names (a
    dict or set: looked up once per entry) and the file's ``[defaults]``."""
    entry = check_keys(entry, _RUN, where)
    missing = [key for key in ("model", "data", "orbit") if key not in entry]
    if missing:
        raise SpecError(f"{where}: missing {', '.join(missing)}")
    wrong = [key for key in ("model", "data", "orbit") if not isinstance(entry[key], str)]
    if wrong:
        raise SpecError(f"{where}: {', '.join(wrong)} must be one string each (a [[runs]] entry is one "
                        "combination; list several entries, or use the data/orbits lists)")
    if entry["model"] not in model_names:
        raise SpecError(f"{where}: names model {short_repr(entry['model'], 60)}, which is not among the "
                        f"models ({short_text(', '.join(islice(model_names, 20)), 200)})")
    name = entry.get("name")
    if name is not None and not (isinstance(name, str) and name):
        raise SpecError(f"{where}: name must be a string, got {short_repr(name, 80)}")
    opts = check_options(entry.get("options"), f"{where}: options")
    check_run_options({**defaults, **opts}, where)
    return RunEntry(entry["model"], spec_string(entry["data"], "data", f"{where}: data"),
                    spec_string(entry["orbit"], "orbit", f"{where}: orbit"),
                    check_task(entry.get("task", "classification"), f"{where}: task"), opts, name,
                    f"{where}: data", f"{where}: orbit", f"{where}: task")

"""Sweep files: a TOML (or YAML) file naming models, data specs, orbits and tasks, read into the
runs of :func:`~orbitscope.engine.sweep.sweep`.

A sweep file (every key optional but ``models``, and ``data`` and ``orbits`` or ``runs``; in
TOML the plain keys come before the first ``[table]``)::

    store = "sweep-runs"              # the store (the CLI's --home wins)
    executor = "ray"                  # local | process | ray (the CLI's --executor wins)
    data = ["mnist-subset:test@200"]
    orbits = ["rotation:0:360:30", "shift:-6:6:3"]
    tasks = ["classification"]        # or tables: { kind = "detection", view_size = 128 }

    [executor_options]                # keyword arguments of the executor
    address = "auto"

    [defaults]                        # evaluate() options for every run
    batch_size = 64

    [[models]]
    name = "plain"
    path = "plain.safetensors"        # an orbitscope model file or a TorchScript / torch.export archive
    [[models]]
    name = "mine"
    factory = "mypkg.nets:make"       # a function that builds the architecture …
    weights = "mine.pt"               # … and its weights (safetensors or a torch.save'd state dict)
    kwargs = { width = 16 }

    [[runs]]                          # listed combinations instead of the cross product
    model = "plain"
    data = "mnist-subset:test@200"
    orbit = "rotation:0:360:30"
    task = "classification"
    options = { batch_size = 32 }

Without ``runs`` the sweep is the cross product models × data × orbits × tasks. Model paths are
relative to the sweep file's folder; data specs are read as the command line reads them.

Every field is checked before any model loads or any run starts: a wrong one is refused with one
line naming the file, the entry and the field. Bounds, checked before anything is built:

* **runs**: at most :data:`MAX_SWEEP_RUNS` (10,000). The cross product is counted, never built
  (:class:`SweepRuns` makes each run when it is read); raise the bound with
  ``load_sweep(..., max_runs=N)``, ``orbitscope sweep --max-runs N`` or the environment variable
  ``ORBITSCOPE_MAX_SWEEP_RUNS``.
* **the file**: at most max(:data:`MAX_SWEEP_FILE_BYTES`, 1 KiB per run allowed) bytes, and
  max(:data:`MAX_SWEEP_VALUES`, 100 per run allowed) values once YAML aliases are expanded (an
  alias repeats what its anchor holds: a few hundred bytes can stand for billions of values, the
  "billion laughs"), nested at most :data:`MAX_SWEEP_DEPTH` levels; a YAML value that holds
  itself is refused. These grow with the run bound.

Messages quote the file's values through :func:`~orbitscope.safe_repr.short_repr` (a bounded
repr).
"""

from __future__ import annotations

import math
import operator
import os
import sys
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, get_args, overload

from ..errors import OrbitscopeError, SpecError
from ..safe_repr import short_repr, short_text
from .sweep import SweepRun

__all__ = ["SweepPlan", "SweepRuns", "load_sweep", "read_sweep_file", "sweep_run_limit", "MAX_SWEEP_RUNS",
           "MAX_SWEEP_RUNS_ENV", "MAX_SWEEP_FILE_BYTES", "MAX_SWEEP_VALUES", "MAX_SWEEP_DEPTH"]

#: Default bound on the runs of one sweep file (a cross product, or ``[[runs]]`` entries).
MAX_SWEEP_RUNS = 10_000
#: Environment variable overriding :data:`MAX_SWEEP_RUNS` (a positive integer).
MAX_SWEEP_RUNS_ENV = "ORBITSCOPE_MAX_SWEEP_RUNS"
#: Least bound on a sweep file's size in bytes (8 MiB; 1 KiB per run allowed when that is more).
MAX_SWEEP_FILE_BYTES = 8 * 2**20
#: Least bound on a sweep file's values once YAML aliases are expanded (100 per run allowed when more).
MAX_SWEEP_VALUES = 1_000_000
#: Bound on how deep a sweep file's values nest (tables and lists).
MAX_SWEEP_DEPTH = 32
_BYTES_PER_RUN, _VALUES_PER_RUN = 1024, 100

_TOP = {"store", "executor", "executor_options", "defaults", "models", "data", "orbits", "tasks", "runs", "name"}
_MODEL = {"name", "path", "factory", "weights", "kwargs", "normalize"}
_RUN = {"model", "data", "orbit", "task", "options", "name"}
_TASK = {"kind", "view_size", "key_objects", "score_threshold", "probabilities", "margin", "max_objects"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return _is_int(v) or isinstance(v, float) and math.isfinite(v)


def _is_normalize(v: Any) -> bool:
    return (isinstance(v, list) and len(v) == 2 and all(isinstance(x, list) and x and all(map(_is_number, x)) for x in v)
            and all(s > 0 for s in v[1]))


def _option_rules() -> dict[str, tuple[Callable[[Any], bool], str]]:
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


_TASK_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "view_size": (lambda v: _is_int(v) and v >= 1, "a positive integer (pixels)"),
    "key_objects": (lambda v: isinstance(v, bool), "true or false"),
    "score_threshold": (_is_number, "a number"),
    "probabilities": (lambda v: isinstance(v, bool), "true or false"),
    "margin": (lambda v: _is_int(v) and v >= 0, "an integer of pixels, at least 0"),
    "max_objects": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
}


class SweepRuns(Sequence[SweepRun]):
    """The runs of a sweep file, each made when it is read: a cross product of millions of runs
    is never held (``len`` is its count). Indexing, slicing and iteration work as on a list."""

    def __init__(self, count: int, make: Callable[[int], SweepRun]) -> None:
        self._count, self._make = count, make

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> SweepRun: ...

    @overload
    def __getitem__(self, index: slice) -> list[SweepRun]: ...

    def __getitem__(self, index: int | slice) -> SweepRun | list[SweepRun]:
        if isinstance(index, slice):
            return [self._make(i) for i in range(*index.indices(self._count))]
        i = operator.index(index)
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(f"run {index} of a sweep of {self._count} runs")
        return self._make(i)

    def __iter__(self) -> Iterator[SweepRun]:
        return (self._make(i) for i in range(self._count))

    def __repr__(self) -> str:
        return f"SweepRuns({self._count} runs)"


@dataclass
class SweepPlan:
    """A sweep read from a file: its runs (a :class:`SweepRuns`) and where and how to run them."""

    runs: Sequence[SweepRun]
    store: str | None = None
    executor: str | None = None
    executor_options: dict[str, Any] = field(default_factory=dict)
    name: str = "sweep"

    def run(self, *, store: Any = None, executor: Any = None, progress: Any = None, resume: bool = True) -> Any:
        """:func:`~orbitscope.engine.sweep.sweep` of the plan (``store``/``executor`` override the file's)."""
        from .executors import get_executor
        from .sweep import sweep

        where = store if store is not None else self.store
        runner = executor if executor is not None else get_executor(self.executor, **self.executor_options)
        return sweep(self.runs, store=where, executor=runner, progress=progress, resume=resume)


def sweep_run_limit(max_runs: int | None = None) -> int:
    """The bound on a sweep's runs: ``max_runs`` when given, else ``$ORBITSCOPE_MAX_SWEEP_RUNS``
    when set, else :data:`MAX_SWEEP_RUNS`.

    Args:
        max_runs: the bound asked for (a positive integer), or None.

    Raises:
        SpecError: ``max_runs`` or the variable is not a positive integer.
    """
    if max_runs is not None:
        if not (_is_int(max_runs) and max_runs >= 1):
            raise SpecError(f"max_runs (--max-runs) must be a positive integer, got {short_repr(max_runs, 40)}")
        return int(max_runs)
    raw = os.environ.get(MAX_SWEEP_RUNS_ENV, "").strip().replace("_", "")
    if not raw:
        return MAX_SWEEP_RUNS
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18 and int(raw) >= 1):
        raise SpecError(f"${MAX_SWEEP_RUNS_ENV}={raw[:40]!r} is not a positive integer")
    return int(raw)


def _raise_hint() -> str:
    return f"--max-runs or ${MAX_SWEEP_RUNS_ENV}"


def _check_structure(raw: Any, p: Path, limit: int) -> None:
    """Refuse values nested deeper than MAX_SWEEP_DEPTH, more than ``limit`` values once aliases are
    expanded, or a value that holds itself; shared values (YAML aliases) are measured once."""
    measured: dict[int, tuple[int, int]] = {}  # id -> (expanded values, height)
    open_now: set[int] = set()

    def measure(value: Any, depth: int) -> tuple[int, int]:
        if not isinstance(value, (dict, list, tuple, set, frozenset)):
            return 1, 0
        key = id(value)
        if key in open_now:
            raise SpecError(f"{p}: a value holds itself (a YAML alias inside its own anchor); write it out")
        if key not in measured:
            if depth >= MAX_SWEEP_DEPTH:
                raise SpecError(f"{p}: values nested more than {MAX_SWEEP_DEPTH} levels deep; a sweep file needs a few")
            open_now.add(key)
            total, height = 1 + (len(value) if isinstance(value, dict) else 0), 0
            for child in (value.values() if isinstance(value, dict) else value):
                size, h = measure(child, depth + 1)
                total, height = total + size, max(height, h + 1)
                if total > limit:
                    raise SpecError(f"{p}: its values expand to more than {limit:,} through YAML aliases (an alias "
                                    "repeats its anchor: a few hundred bytes can stand for billions); write them out, "
                                    f"or raise the bound (100 values per run allowed) with {_raise_hint()}")
            open_now.discard(key)
            measured[key] = (total, height)
        total, height = measured[key]
        if depth + height > MAX_SWEEP_DEPTH:
            raise SpecError(f"{p}: values nested more than {MAX_SWEEP_DEPTH} levels deep; a sweep file needs a few")
        return total, height

    measure(raw, 0)


def read_sweep_file(path: str | os.PathLike[str], *, max_runs: int | None = None) -> dict[str, Any]:
    """The raw contents of a ``.toml``, ``.yaml`` or ``.yml`` sweep file, within the file's bounds
    (see the module docs).

    Args:
        path: the file.
        max_runs: the run bound (see :func:`sweep_run_limit`); the file's bounds grow with it.

    Raises:
        FileNotFoundError: no such file.
        SpecError: the file is over a bound, not UTF-8, or not valid TOML / YAML.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"sweep file not found: '{p}'")
    runs = sweep_run_limit(max_runs)
    limit = max(MAX_SWEEP_FILE_BYTES, _BYTES_PER_RUN * runs)
    with open(p, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        size = max(p.stat().st_size, len(data))
        raise SpecError(f"{p} is {size:,} bytes, over the limit of {limit:,} bytes for a sweep file (is it the right "
                        f"file?); raise the bound (1 KiB per run allowed) with {_raise_hint()}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p} is not UTF-8 text (byte {exc.start}); a sweep file is TOML or YAML text") from None
    yaml_file = p.suffix.lower() in (".yaml", ".yml")
    try:
        if yaml_file:
            try:
                import yaml
            except ImportError as exc:
                raise SpecError("reading a YAML sweep file needs PyYAML: pip install pyyaml (or write the file as "
                                "TOML)") from exc
            try:
                raw = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise SpecError(f"{p} is not valid YAML: {short_text(str(exc))}") from None
        else:
            try:
                raw = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise SpecError(f"{p} is not valid TOML: {short_text(str(exc))}") from None
    except RecursionError:
        raise SpecError(f"{p}: values nested too deeply to read (a sweep file needs a few levels)") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        if isinstance(exc, SpecError):
            raise
        raise SpecError(f"{p} is not valid {'YAML' if yaml_file else 'TOML'}: {short_text(str(exc))}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{p}: a sweep file is a table of keys ({', '.join(sorted(_TOP))}), got {type(raw).__name__}")
    _check_structure(raw, p, max(MAX_SWEEP_VALUES, _VALUES_PER_RUN * runs))
    return raw


def _key_text(key: Any) -> str:
    return short_text(key, 60) if isinstance(key, str) else short_repr(key, 60)


def _check_keys(table: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table of keys ({', '.join(sorted(allowed))}), got {short_repr(table, 80)}")
    unknown = sorted((_key_text(k) for k in table if k not in allowed))
    if unknown:
        hint = ""
        if set(unknown) & _TOP and allowed is not _TOP:
            hint = " (in TOML, plain keys such as data and orbits go before the first [table] or [[table]])"
        shown = ", ".join(unknown[:10]) + (f", … ({len(unknown)} in all)" if len(unknown) > 10 else "")
        raise SpecError(f"{where}: unknown key(s) {shown}; allowed: {', '.join(sorted(allowed))}{hint}")
    return table


def _check_fields(table: dict[str, Any], rules: dict[str, tuple[Callable[[Any], bool], str]], where: str) -> None:
    for key, value in table.items():
        check, what = rules[key]
        if not check(value):
            raise SpecError(f"{where}: {key} must be {what}, got {short_repr(value, 80)}")


def _check_run_options(opts: dict[str, Any], where: str) -> None:
    """The checks between options (optimize and precision) and of the device, on the options a run gets."""
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
            raise SpecError(f"{where}: device {opts['device']!r}: CUDA is not available to this torch build; use 'cpu'")


def _options(table: Any, where: str) -> dict[str, Any]:
    if table is None:
        return {}
    opts = dict(_check_keys(table, set(_option_rules()), where))
    _check_fields(opts, _option_rules(), where)
    if "normalize" in opts:
        opts["normalize"] = (list(opts["normalize"][0]), list(opts["normalize"][1]))
    _check_run_options(opts, where)
    return opts


@contextmanager
def _naming(where: str) -> Iterator[None]:
    """Errors of loading a model, opening data or parsing an orbit, with ``where`` (file, entry,
    field) before their message; errors without a message of their own become SpecErrors."""
    try:
        yield
    except (OrbitscopeError, ValueError, TypeError, AttributeError, LookupError, OSError, ImportError) as exc:
        text = f"{where}: {short_text(str(exc))}"
        if isinstance(exc, (OrbitscopeError, OSError, ImportError)) and len(exc.args) == 1 \
                and isinstance(exc.args[0], str):
            exc.args = (text,)  # the same error (FileNotFoundError, ModelError, …), named
            raise
        raise SpecError(text) from exc


def _check_model(entry: Any, k: int, p: Path, names: set[str]) -> tuple[str, dict[str, Any], str]:
    """A [[models]] entry checked, not loaded: its name, the entry and how to name it in messages."""
    where = f"{p}: [[models]] entry {k}"
    entry = _check_keys(entry, _MODEL, where)
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
        _options({"normalize": entry["normalize"]}, where)
    return name, entry, where


def _load_model(entry: dict[str, Any], base: Path, trust: bool) -> Any:
    from ..models.loading import load_user_model

    path, factory, weights = entry.get("path"), entry.get("factory"), entry.get("weights")
    if path is not None:
        return load_user_model(str(base / path), trust=trust)
    return load_user_model(factory, str(base / weights) if weights is not None else None,
                           factory_kwargs=entry.get("kwargs") or {}, trust=trust)


def _task(entry: Any, where: str) -> tuple[str, dict[str, Any]]:
    from ..tasks.setup import TASK_KINDS

    if isinstance(entry, str):
        kind, table = entry, {}
    elif isinstance(entry, dict):
        table = dict(_check_keys(entry, _TASK, where))
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


def _task_label(kind: str, opts: dict[str, Any]) -> str:
    return kind + "".join(f",{k}={v}" for k, v in sorted(opts.items()))


def _spec(value: Any, what: str, example: str, where: str) -> str:
    if not (isinstance(value, str) and value.strip()):
        raise SpecError(f"{where}: must be {what} spec string such as {example!r}, got {short_repr(value, 80)}")
    return value


def _entries(raw: dict[str, Any], key: str, p: Path) -> list[Any]:
    value = raw.get(key, [])
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list):
        raise SpecError(f"{p}: {key} must be a list, got {short_repr(value, 80)}")
    return value


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 or word == "data" else "s")


def load_sweep(path: str | os.PathLike[str], *, trust: bool = False, max_runs: int | None = None) -> SweepPlan:
    """Read a sweep file into a :class:`SweepPlan`: every field checked, the runs counted (not
    built) against the run bound, then the models loaded, each data spec opened and each orbit
    parsed once, and each data × orbit × task checked once; the runs are made when read.

    Args:
        path: the sweep file (``.toml``, ``.yaml`` or ``.yml``).
        trust: load model files that are programs (TorchScript archives), see :mod:`orbitscope.trust`.
        max_runs: the run bound (default: ``$ORBITSCOPE_MAX_SWEEP_RUNS`` or :data:`MAX_SWEEP_RUNS`).

    Raises:
        SpecError: a field of a wrong type or value, unknown keys, a model named twice or not at all,
            an unknown task kind, bad orbit or data specs, more runs than the bound, a file over
            its bounds (the message names the file, the entry and the field).
        FileNotFoundError: the file, a model file or a data file is missing.
    """
    from ..data.specs import parse_data_spec
    from ..group.parse import parse_orbit
    from ..tasks.setup import task_and_data

    p = Path(path)
    limit = sweep_run_limit(max_runs)
    raw = _check_keys(read_sweep_file(p, max_runs=limit), _TOP, str(p))
    for key in ("store", "executor", "name"):
        if raw.get(key) is not None and not (isinstance(raw[key], str) and raw[key]):
            what = {"store": "a folder (a string path)", "executor": "a name (local, process, ray)",
                    "name": "a string"}[key]
            raise SpecError(f"{p}: {key} must be {what}, got {short_repr(raw[key], 80)}")
    ex_opts = raw.get("executor_options")
    if ex_opts is not None and not (isinstance(ex_opts, dict) and all(isinstance(k, str) for k in ex_opts)):
        raise SpecError(f"{p}: [executor_options] must be a table, got {short_repr(ex_opts, 80)}")
    defaults = _options(raw.get("defaults"), f"{p}: [defaults]")
    names: set[str] = set()
    model_entries: list[tuple[str, dict[str, Any], str]] = []
    for k, entry in enumerate(_entries(raw, "models", p), 1):
        model_entries.append(_check_model(entry, k, p, names))
        names.add(model_entries[-1][0])
    if not model_entries:
        raise SpecError(f"{p}: no models; add [[models]] entries with a name and a path or factory")
    model_names = [name for name, _, _ in model_entries]

    # the runs, counted before anything is built, then every entry checked
    if raw.get("runs") and any(raw.get(k) for k in ("data", "orbits", "tasks")):
        raise SpecError(f"{p}: give either [[runs]] entries or data/orbits/tasks lists (their cross product), not both")
    listed = _entries(raw, "runs", p) if raw.get("runs") else None
    if listed is not None:
        count = len(listed)
        sizes = f"lists {count:,} [[runs]] entr{'y' if count == 1 else 'ies'}"
    else:
        data, orbits, tasks = _entries(raw, "data", p), _entries(raw, "orbits", p), _entries(raw, "tasks", p)
        tasks = tasks or ["classification"]
        if not data or not orbits:
            raise SpecError(f"{p}: give data = [specs…] and orbits = [specs…] (their cross product with the models "
                            "is the sweep), or [[runs]] entries")
        count = len(model_names) * len(data) * len(orbits) * len(tasks)
        sizes = (f"is {_plural(len(model_names), 'model')} × {_plural(len(data), 'data')} × "
                 f"{_plural(len(orbits), 'orbit')} × {_plural(len(tasks), 'task')} = {count:,} runs")
    if count > limit:
        raise SpecError(f"{p}: the sweep {sizes}, over the limit of {limit:,} runs; list fewer, or raise the limit "
                        f"with --max-runs {count} (load_sweep(max_runs={count}), or the environment variable "
                        f"{MAX_SWEEP_RUNS_ENV})")
    # combos: (model, data spec, where, orbit spec, where, task (kind, options), where, options, name)
    combos: list[tuple[str, str, str, str, str, tuple[str, dict[str, Any]], str, dict[str, Any], str | None]] = []
    if listed is not None:
        for k, entry in enumerate(listed, 1):
            where = f"{p}: [[runs]] entry {k}"
            entry = _check_keys(entry, _RUN, where)
            missing = [key for key in ("model", "data", "orbit") if key not in entry]
            if missing:
                raise SpecError(f"{where}: missing {', '.join(missing)}")
            wrong = [key for key in ("model", "data", "orbit") if not isinstance(entry[key], str)]
            if wrong:
                raise SpecError(f"{where}: {', '.join(wrong)} must be one string each (a [[runs]] entry is one "
                                "combination; list several entries, or use the data/orbits lists)")
            if entry["model"] not in names:
                raise SpecError(f"{where}: names model {short_repr(entry['model'], 60)}, which is not among the "
                                f"models ({short_text(', '.join(model_names), 200)})")
            name = entry.get("name")
            if name is not None and not (isinstance(name, str) and name):
                raise SpecError(f"{where}: name must be a string, got {short_repr(name, 80)}")
            opts = _options(entry.get("options"), f"{where}: options")
            _check_run_options({**defaults, **opts}, where)
            combos.append((entry["model"], _spec(entry["data"], "a data", "mnist-subset:test@200", f"{where}: data"),
                           f"{where}: data", _spec(entry["orbit"], "an orbit", "rotation:0:360:30", f"{where}: orbit"),
                           f"{where}: orbit", _task(entry.get("task", "classification"), f"{where}: task"),
                           f"{where}: task", opts, name))
        data_specs = [(c[1], c[2]) for c in combos]
        orbit_specs = [(c[3], c[4]) for c in combos]
    else:
        data_specs = [(_spec(d, "a data", "mnist-subset:test@200", f"{p}: data entry {k}"), f"{p}: data entry {k}")
                      for k, d in enumerate(data, 1)]
        orbit_specs = [(_spec(o, "an orbit", "rotation:0:360:30", f"{p}: orbits entry {k}"), f"{p}: orbits entry {k}")
                       for k, o in enumerate(orbits, 1)]
        task_pairs = [(_task(t, f"{p}: tasks entry {k}"), f"{p}: tasks entry {k}") for k, t in enumerate(tasks, 1)]
    executor = raw.get("executor")
    from .executors import EXECUTORS, get_executor

    if executor is not None and executor not in EXECUTORS:
        raise SpecError(f"{p}: executor {short_repr(executor, 40)} is unknown; choose {', '.join(EXECUTORS.names())}")
    try:  # options the executor does not take fail here, before the models are loaded
        get_executor(executor or "local", **(ex_opts or {}))
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{p}: [executor_options] do not fit executor {executor or 'local'!r}: "
                        f"{short_text(str(exc))}") from exc

    # what the runs share, made once: models, datasets, orbits, and each data × orbit × task
    base = p.resolve().parent
    if str(base) not in sys.path:  # 'mymodule:factory' next to the sweep file imports
        sys.path.insert(0, str(base))
    models: dict[str, Any] = {}
    norms: dict[str, Any] = {}
    for name, entry, where in model_entries:
        with _naming(where):
            models[name] = _load_model(entry, base, trust)
        if entry.get("normalize") is not None:
            norms[name] = (list(entry["normalize"][0]), list(entry["normalize"][1]))
    datasets: dict[str, Any] = {}
    for spec, where in data_specs:
        if spec not in datasets:
            with _naming(f"{where} {short_repr(spec, 80)}"):
                datasets[spec] = parse_data_spec(spec)
    parsed_orbits: dict[str, Any] = {}
    for spec, where in orbit_specs:
        if spec not in parsed_orbits:
            with _naming(f"{where} {short_repr(spec, 80)}"):
                parsed_orbits[spec] = parse_orbit(spec)
    prepared: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}

    def prepare(data_spec: str, orbit_spec: str, task: tuple[str, dict[str, Any]], where: str) -> None:
        key = (data_spec, orbit_spec, _task_label(*task))
        if key not in prepared:
            with _naming(f"{where}: {short_repr(data_spec, 80)} over {short_repr(orbit_spec, 80)} ({task[0]})"):
                prepared[key] = task_and_data(task[0], datasets[data_spec], parsed_orbits[orbit_spec], **task[1])

    if listed is not None:
        for c in combos:
            prepare(c[1], c[3], c[5], c[6])
    else:
        for d in datasets:
            for o in parsed_orbits:
                for task, _ in task_pairs:
                    prepare(d, o, task, str(p))

    def make(model: str, data_spec: str, orbit_spec: str, task_entry: tuple[str, dict[str, Any]],
             opts: dict[str, Any], name: str | None) -> SweepRun:
        kind, task_opts = task_entry
        task_label = _task_label(kind, task_opts)
        task, dataset, view = prepared[(data_spec, orbit_spec, task_label)]
        options = {**defaults, **opts}
        if model in norms:
            options.setdefault("normalize", norms[model])
        if view is not None:
            options["view_size"] = view
        label = name or f"{model} · {data_spec} · {orbit_spec}" + (f" · {task_label}" if kind != "classification"
                                                                      or task_opts else "")
        return SweepRun(models[model], dataset, parsed_orbits[orbit_spec], task, name=name or label, model_name=model,
                        options=options, label=label, data_label=data_spec, task_label=task_label,
                        orbit_label=orbit_spec)

    if listed is not None:
        runs = SweepRuns(count, lambda i: make(combos[i][0], combos[i][1], combos[i][3], combos[i][5], combos[i][7],
                                               combos[i][8]))
    else:
        n_data, n_orbits, n_tasks = len(data), len(orbits), len(tasks)
        task_entries = [t for t, _ in task_pairs]

        def cross(i: int) -> SweepRun:  # models outermost, tasks innermost
            rest, t = divmod(i, n_tasks)
            rest, o = divmod(rest, n_orbits)
            m, d = divmod(rest, n_data)
            return make(model_names[m], data[d], orbits[o], task_entries[t], {}, None)

        runs = SweepRuns(count, cross)
    store = raw.get("store")
    return SweepPlan(runs, str(base / store) if store is not None else None, executor, dict(ex_opts or {}),
                     str(raw.get("name") or p.stem))

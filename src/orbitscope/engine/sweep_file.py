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

import operator
import os
import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, overload

from ..errors import SpecError
from ..safe_repr import short_repr, short_text
from .sweep import SweepRun
from .sweep_fields import (TOP_KEYS, RunEntry, check_keys, check_model_entry, check_options, check_run_entry,
                           check_task, entries, naming, spec_string, task_label)

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
        if isinstance(max_runs, bool) or not (isinstance(max_runs, int) and max_runs >= 1):
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
                    how = (f"its values expand to more than {limit:,} through YAML aliases (an alias repeats its "
                           "anchor: a few hundred bytes can stand for billions); write them out"
                           if p.suffix.lower() in (".yaml", ".yml") else f"more than {limit:,} values; list fewer")
                    raise SpecError(f"{p}: {how}, or raise the bound (100 values per run allowed) with {_raise_hint()}")
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
                # libyaml's parser when installed (5x faster); the same safe constructor either way
                raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
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
        raise SpecError(f"{p}: a sweep file is a table of keys ({', '.join(sorted(TOP_KEYS))}), got {type(raw).__name__}")
    _check_structure(raw, p, max(MAX_SWEEP_VALUES, _VALUES_PER_RUN * runs))
    return raw


def _load_model(entry: dict[str, Any], base: Path, trust: bool) -> Any:
    from ..models.loading import load_user_model

    path, factory, weights = entry.get("path"), entry.get("factory"), entry.get("weights")
    if path is not None:
        return load_user_model(str(base / path), trust=trust)
    return load_user_model(factory, str(base / weights) if weights is not None else None,
                           factory_kwargs=entry.get("kwargs") or {}, trust=trust)


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
    from .executors import EXECUTORS, get_executor

    p = Path(path)
    limit = sweep_run_limit(max_runs)
    raw = check_keys(read_sweep_file(p, max_runs=limit), TOP_KEYS, str(p))
    for key, what in (("store", "a folder (a string path)"), ("executor", "a name (local, process, ray)"),
                      ("name", "a string")):
        if raw.get(key) is not None and not (isinstance(raw[key], str) and raw[key]):
            raise SpecError(f"{p}: {key} must be {what}, got {short_repr(raw[key], 80)}")
    ex_opts = raw.get("executor_options")
    if ex_opts is not None and not (isinstance(ex_opts, dict) and all(isinstance(k, str) for k in ex_opts)):
        raise SpecError(f"{p}: [executor_options] must be a table, got {short_repr(ex_opts, 80)}")
    defaults = check_options(raw.get("defaults"), f"{p}: [defaults]")
    model_list = entries(raw, "models", p)
    if not model_list:
        raise SpecError(f"{p}: no models; add [[models]] entries with a name and a path or factory")
    if len(model_list) > limit:
        raise SpecError(f"{p}: the sweep lists {len(model_list):,} models, over the limit of {limit:,} runs; list fewer, "
                        f"or raise the limit with --max-runs {len(model_list)} (load_sweep(max_runs=…), or the "
                        f"environment variable {MAX_SWEEP_RUNS_ENV})")
    model_entries: list[tuple[str, dict[str, Any], str]] = []
    names: set[str] = set()
    for k, entry in enumerate(model_list, 1):
        model_entries.append(check_model_entry(entry, k, p, names))
        names.add(model_entries[-1][0])
    model_names = [name for name, _, _ in model_entries]

    # the runs: counted before they are checked one by one or built
    if raw.get("runs") and any(raw.get(k) for k in ("data", "orbits", "tasks")):
        raise SpecError(f"{p}: give either [[runs]] entries or data/orbits/tasks lists (their cross product), not both")
    listed = entries(raw, "runs", p) if raw.get("runs") else None
    if listed is not None:
        count = len(listed)
        sizes = f"lists {count:,} [[runs]] entr{'y' if count == 1 else 'ies'}"
    else:
        data, orbits, tasks = entries(raw, "data", p), entries(raw, "orbits", p), entries(raw, "tasks", p)
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
    if listed is not None:
        known = dict.fromkeys(model_names)
        runs_listed = [check_run_entry(entry, f"{p}: [[runs]] entry {k}", known, defaults)
                       for k, entry in enumerate(listed, 1)]
        data_specs = [(r.data, r.data_where) for r in runs_listed]
        orbit_specs = [(r.orbit, r.orbit_where) for r in runs_listed]
    else:
        data_specs = [(spec_string(d, "data", f"{p}: data entry {k}"), f"{p}: data entry {k}")
                      for k, d in enumerate(data, 1)]
        orbit_specs = [(spec_string(o, "orbit", f"{p}: orbits entry {k}"), f"{p}: orbits entry {k}")
                       for k, o in enumerate(orbits, 1)]
        task_entries = [check_task(t, f"{p}: tasks entry {k}") for k, t in enumerate(tasks, 1)]
    executor = raw.get("executor")
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
        with naming(where):
            models[name] = _load_model(entry, base, trust)
        if entry.get("normalize") is not None:
            norms[name] = (list(entry["normalize"][0]), list(entry["normalize"][1]))
    datasets: dict[str, Any] = {}
    for spec, where in data_specs:
        if spec not in datasets:
            with naming(f"{where} {short_repr(spec, 80)}"):
                datasets[spec] = parse_data_spec(spec)
    parsed_orbits: dict[str, Any] = {}
    for spec, where in orbit_specs:
        if spec not in parsed_orbits:
            with naming(f"{where} {short_repr(spec, 80)}"):
                parsed_orbits[spec] = parse_orbit(spec)
    prepared: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}  # (data, orbit, task label) -> task, data, view

    def prepare(data_spec: str, orbit_spec: str, task: tuple[str, dict[str, Any]], where: str) -> None:
        key = (data_spec, orbit_spec, task_label(*task))
        if key not in prepared:
            with naming(f"{where}: {short_repr(data_spec, 80)} over {short_repr(orbit_spec, 80)} ({task[0]})"):
                prepared[key] = task_and_data(task[0], datasets[data_spec], parsed_orbits[orbit_spec], **task[1])

    if listed is not None:
        for r in runs_listed:
            prepare(r.data, r.orbit, r.task, r.task_where)
    else:
        for d in datasets:
            for o in parsed_orbits:
                for task in task_entries:
                    prepare(d, o, task, str(p))

    def make(r: RunEntry) -> SweepRun:
        kind, task_opts = r.task
        label_of_task = task_label(kind, task_opts)
        task, dataset, view = prepared[(r.data, r.orbit, label_of_task)]
        options = {**defaults, **r.options}
        if r.model in norms:
            options.setdefault("normalize", norms[r.model])
        if view is not None:
            options["view_size"] = view
        label = r.name or f"{r.model} · {r.data} · {r.orbit}" + (f" · {label_of_task}" if kind != "classification"
                                                                    or task_opts else "")
        return SweepRun(models[r.model], dataset, parsed_orbits[r.orbit], task, name=r.name or label,
                        model_name=r.model, options=options, label=label, data_label=r.data,
                        task_label=label_of_task, orbit_label=r.orbit)

    if listed is not None:
        runs = SweepRuns(count, lambda i: make(runs_listed[i]))
    else:
        n_data, n_orbits, n_tasks = len(data), len(orbits), len(tasks)

        def cross(i: int) -> SweepRun:  # models outermost, tasks innermost
            rest, t = divmod(i, n_tasks)
            rest, o = divmod(rest, n_orbits)
            m, d = divmod(rest, n_data)
            return make(RunEntry(model_names[m], data[d], orbits[o], task_entries[t]))

        runs = SweepRuns(count, cross)
    store = raw.get("store")
    return SweepPlan(runs, str(base / store) if store is not None else None, executor, dict(ex_opts or {}),
                     str(raw.get("name") or p.stem))

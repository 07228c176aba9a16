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
"""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SpecError
from .sweep import SweepRun

__all__ = ["SweepPlan", "load_sweep", "read_sweep_file"]

_TOP = {"store", "executor", "executor_options", "defaults", "models", "data", "orbits", "tasks", "runs", "name"}
_MODEL = {"name", "path", "factory", "weights", "kwargs", "normalize"}
_RUN = {"model", "data", "orbit", "task", "options", "name"}
_TASK = {"kind", "view_size", "key_objects", "score_threshold", "probabilities", "margin", "max_objects"}
#: evaluate() options a sweep file may set (the others are the sweep's own)
_OPTIONS = {"batch_size", "forward_batch", "memory_budget_mb", "device", "normalize", "interpolation", "padding",
            "optimize", "precision", "seed", "store_inputs", "activations", "consensus", "allow_large"}


@dataclass
class SweepPlan:
    """A sweep read from a file: its runs and where and how to run them."""

    runs: list[SweepRun]
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


def read_sweep_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw contents of a ``.toml``, ``.yaml`` or ``.yml`` sweep file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"sweep file not found: '{p}'")
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise SpecError("reading a YAML sweep file needs PyYAML: pip install pyyaml (or write the file as TOML)") from exc
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(f"{p} is not valid YAML: {exc}") from exc
    else:
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{p} is not valid TOML: {exc}") from exc
    if not isinstance(raw, dict):
        raise SpecError(f"{p}: a sweep file is a table of keys ({', '.join(sorted(_TOP))}), got {type(raw).__name__}")
    return raw


def _check_keys(table: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table of keys ({', '.join(sorted(allowed))}), got {table!r}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        hint = ""
        if set(unknown) & _TOP and allowed is not _TOP:
            hint = " (in TOML, plain keys such as data and orbits go before the first [table] or [[table]])"
        raise SpecError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}{hint}")
    return table


def _strings(raw: dict[str, Any], key: str, where: str) -> list[Any]:
    value = raw.get(key, [])
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list):
        raise SpecError(f"{where}: {key} must be a list, got {value!r}")
    return value


def _options(table: Any, where: str) -> dict[str, Any]:
    opts = dict(_check_keys(table or {}, _OPTIONS, where))
    norm = opts.get("normalize")
    if norm is not None:
        if not (isinstance(norm, list) and len(norm) == 2):
            raise SpecError(f"{where}: normalize must be [[means…], [stds…]], got {norm!r}")
        opts["normalize"] = (list(norm[0]), list(norm[1]))
    return opts


def _load_model(entry: dict[str, Any], base: Path, trust: bool) -> Any:
    from ..models.loading import load_user_model

    name = entry.get("name")
    if name is None or name == "":
        raise SpecError(f"every model needs a name, got {entry!r}")
    if not isinstance(name, str):
        raise SpecError(f"model names are strings: write name = \"{name}\", not {name!r}")
    path, factory = entry.get("path"), entry.get("factory")
    if (path is None) == (factory is None):
        raise SpecError(f"model {name!r}: give either path (a model file) or factory ('package.module:function')")
    weights = entry.get("weights")
    if path is not None:
        if weights is not None:
            raise SpecError(f"model {name!r}: weights go with a factory; a model file holds its own")
        return load_user_model(str(base / path), trust=trust)
    kwargs = entry.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise SpecError(f"model {name!r}: kwargs must be a table, got {kwargs!r}")
    return load_user_model(factory, str(base / weights) if weights is not None else None, factory_kwargs=kwargs,
                           trust=trust)


def _task(entry: Any, where: str) -> tuple[str, dict[str, Any]]:
    if isinstance(entry, str):
        return entry, {}
    table = dict(_check_keys(entry, _TASK, where))
    kind = table.pop("kind", None)
    if not isinstance(kind, str):
        raise SpecError(f"{where}: a task table needs kind = 'classification' | 'detection' | 'flow' | 'pointcloud'")
    return kind, table


def _task_label(kind: str, opts: dict[str, Any]) -> str:
    return kind + "".join(f",{k}={v}" for k, v in sorted(opts.items()))


def load_sweep(path: str | os.PathLike[str], *, trust: bool = False) -> SweepPlan:
    """Read a sweep file into a :class:`SweepPlan` (models loaded, data opened once per spec).

    Raises:
        SpecError: unknown keys, a model named twice or not at all, an unknown task kind, bad
            orbit or data specs (the message names the entry).
        FileNotFoundError: the file, a model file or a data file is missing.
    """
    from ..data.specs import parse_data_spec
    from ..group.parse import parse_orbit
    from ..tasks.setup import TASK_KINDS, task_and_data

    p = Path(path)
    raw = _check_keys(read_sweep_file(p), _TOP, str(p))
    base = p.resolve().parent
    if str(base) not in sys.path:  # 'mymodule:factory' next to the sweep file imports
        sys.path.insert(0, str(base))
    defaults = _options(raw.get("defaults"), f"{p}: [defaults]")
    models: dict[str, Any] = {}
    norms: dict[str, Any] = {}
    for entry in _strings(raw, "models", str(p)):
        entry = _check_keys(entry, _MODEL, f"{p}: a [[models]] entry")
        if entry.get("name") in models:
            raise SpecError(f"{p}: model {entry['name']!r} is named twice")
        models[entry["name"]] = _load_model(entry, base, trust)
        if entry.get("normalize") is not None:
            norms[entry["name"]] = _options({"normalize": entry["normalize"]}, f"model {entry['name']!r}")["normalize"]
    if not models:
        raise SpecError(f"{p}: no models; add [[models]] entries with a name and a path or factory")
    combos: list[tuple[str, str, str, Any, dict[str, Any], str | None]] = []
    if raw.get("runs") and any(raw.get(k) for k in ("data", "orbits", "tasks")):
        raise SpecError(f"{p}: give either [[runs]] entries or data/orbits/tasks lists (their cross product), not both")
    if raw.get("runs"):
        for k, entry in enumerate(_strings(raw, "runs", str(p))):
            where = f"{p}: [[runs]] entry {k + 1}"
            entry = _check_keys(entry, _RUN, where)
            missing = [key for key in ("model", "data", "orbit") if key not in entry]
            if missing:
                raise SpecError(f"{where}: missing {', '.join(missing)}")
            wrong = [key for key in ("model", "data", "orbit") if not isinstance(entry[key], str)]
            if wrong:
                raise SpecError(f"{where}: {', '.join(wrong)} must be one string each (a [[runs]] entry is one "
                                "combination; list several entries, or use the data/orbits lists)")
            combos.append((entry["model"], entry["data"], entry["orbit"], entry.get("task", "classification"),
                           _options(entry.get("options"), where), entry.get("name")))
    else:
        data, orbits = _strings(raw, "data", str(p)), _strings(raw, "orbits", str(p))
        tasks = _strings(raw, "tasks", str(p)) or ["classification"]
        if not data or not orbits:
            raise SpecError(f"{p}: give data = [specs…] and orbits = [specs…] (their cross product with the models "
                            "is the sweep), or [[runs]] entries")
        combos = [(m, d, o, t, {}, None) for m in models for d in data for o in orbits for t in tasks]
    datasets: dict[str, Any] = {}
    runs: list[SweepRun] = []
    for model, data_spec, orbit_spec, task_entry, opts, name in combos:
        if model not in models:
            raise SpecError(f"{p}: run names model {model!r}, which is not among the models ({', '.join(models)})")
        kind, task_opts = _task(task_entry, f"{p}: task {task_entry!r}")
        if kind not in TASK_KINDS:
            raise SpecError(f"{p}: task {kind!r} is unknown; choose {', '.join(TASK_KINDS)}")
        for what, value in (("data", data_spec), ("orbit", orbit_spec)):
            if not isinstance(value, str):
                raise SpecError(f"{p}: every {what} is a spec string, got {value!r}")
        try:
            if data_spec not in datasets:
                datasets[data_spec] = parse_data_spec(data_spec)
            orbit = parse_orbit(orbit_spec)
            task, dataset, view = task_and_data(kind, datasets[data_spec], orbit, **task_opts)
        except (ValueError, TypeError) as exc:  # SpecError and DataError are ValueErrors
            raise SpecError(f"{p}: model {model!r} on {data_spec!r} over {orbit_spec!r} ({kind}): {exc}") from exc
        options = {**defaults, **opts}
        if model in norms:
            options.setdefault("normalize", norms[model])
        if view is not None:
            options["view_size"] = view
        task_label = _task_label(kind, task_opts)
        label = name or f"{model} · {data_spec} · {orbit_spec}" + (f" · {task_label}" if kind != "classification"
                                                                      or task_opts else "")
        runs.append(SweepRun(models[model], dataset, orbit, task, name=name or label, model_name=model,
                             options=options, label=label, data_label=data_spec, task_label=task_label))
    executor = raw.get("executor")
    if executor is not None and not isinstance(executor, str):
        raise SpecError(f"{p}: executor must be a name (local, process, ray), got {executor!r}")
    ex_opts = raw.get("executor_options") or {}
    if not isinstance(ex_opts, dict):
        raise SpecError(f"{p}: [executor_options] must be a table, got {ex_opts!r}")
    from .executors import EXECUTORS, get_executor

    if executor is not None and executor not in EXECUTORS:
        raise SpecError(f"{p}: executor {executor!r} is unknown; choose {', '.join(EXECUTORS.names())}")
    try:  # options the executor does not take fail here, not after the models are loaded
        get_executor(executor or "local", **ex_opts)
    except TypeError as exc:
        raise SpecError(f"{p}: [executor_options] do not fit executor {executor or 'local'!r}: {exc}") from exc
    store = raw.get("store")
    return SweepPlan(runs, str(base / store) if isinstance(store, str) else None, executor, dict(ex_opts),
                     str(raw.get("name") or p.stem))

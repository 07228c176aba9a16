"""``lie_derivative``: the LEE of a model over a dataset, stored as a run like any orbit evaluation.

A LEE run has dims ``(sample, generator)`` and records

* ``lee``: ``‖L_X f(x)‖²`` per sample and generator (see :mod:`orbitscope.lie.derivative`);
* ``layer_lee`` (with ``layers=True``): ``‖c_i‖²`` per sample, generator and leaf module ``layer``
  (the exact contribution of each layer's own equivariance defect), the last "layer" being
  ``"(output)"``: what happens after the last module.

It lives in the same store as orbit runs, with a run id from everything that determines it (the
model's weights and architecture, the data, the task, the generators, the steps, the action
options), is written chunk by chunk (an interrupted run resumes where it stopped), and loads
lazily as an :class:`~orbitscope.results.OrbitResult`, so :func:`orbitscope.aggregate` gives the
mean LEE per generator with its Student-t interval. ``attrs["measure"] == "lee"`` marks it.
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import ExitStack
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..engine.evaluation import Run
from ..engine.model_call import Normalizer
from ..engine.source import DataSource
from ..errors import DataError, SpecError
from ..kinds.base import get_kind
from ..models.reference import eval_mode, model_device, model_hash
from ..results.result import assemble_result
from ..results.store import Store, open_store
from ..tasks.base import Task
from ..tasks.classification import Classification
from ..tasks.variables import Variable
from .derivative import Method, Scores, check_generator, lie_terms
from .generators import PLANAR, SPATIAL, get_generator

__all__ = ["lie_derivative", "is_lee_run", "LEE_VARIABLES", "default_generators"]

#: the variables of a LEE run
LEE_VARIABLES = {
    "lee": Variable("lee", "float64", description="local equivariance error ‖L_X f(x)‖² (Gruver et al. 2023, Eq. 4), "
                    "in output² per generator unit²", lower_is_better=True, needs_labels=False, label="LEE"),
    "layer_lee": Variable("layer_lee", "float64", extra_dims=("layer",), lower_is_better=True, needs_labels=False,
                          description="‖c_i‖², the squared norm of one leaf module's contribution to L_X f",
                          label="layer LEE"),
}

Progress = Callable[[int, "int | None"], None]


def default_generators(input_kind: str) -> tuple[str, ...]:
    """Every generator that acts on the input kind: the planar ones for images, frames and windows
    (the spatial ones for flow), SO(3)'s three axes for point clouds."""
    if input_kind == "points":
        return SPATIAL
    return PLANAR


def is_lee_run(record_or_result: Any) -> bool:
    """Whether a store record (or a result) is a LEE run rather than an orbit evaluation."""
    attrs = getattr(record_or_result, "attrs", {}) or {}
    return attrs.get("measure") == "lee"


def lie_derivative(
    model: nn.Module,
    data: Any,
    generators: str | Sequence[str] | None = None,
    task: Task | None = None,
    *,
    store: Store | str | None = None,
    name: str | None = None,
    model_name: str | None = None,
    data_id: str | None = None,
    batch_size: int = 64,
    device: str | torch.device | None = None,
    normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    interpolation: str = "bilinear",
    padding: str = "zeros",
    view_size: tuple[int, int] | None = None,
    layers: bool | str = True,
    probes: int = 64,
    method: Method = "jvp",
    step: float | None = None,
    scores: Scores = "probabilities",
    resume: bool = True,
    progress: Progress | None = None,
) -> Run:
    """The local equivariance error (LEE) of ``model`` on every sample of ``data`` along each generator.

    ``store``, ``name``, ``model_name``, ``data_id``, ``batch_size``, ``device``, ``normalize``,
    ``interpolation``, ``padding``, ``view_size``, ``resume`` and ``progress`` are
    :func:`orbitscope.evaluate`'s (``batch_size``: samples per chunk, the unit of storage and
    resumption).

    Args:
        model: the module (as for :func:`orbitscope.evaluate`); it runs in eval mode.
        data: as for :func:`orbitscope.evaluate` (the targets are not used: LEE is label-free).
        generators: generator names (:func:`orbitscope.lie.list_generators`), one or several;
            default: every generator that acts on the task's input kind (:func:`default_generators`).
        task: how outputs are read and how the group acts on inputs and outputs (default
            :class:`~orbitscope.tasks.Classification`: output scores are invariant).
        layers: also attribute the derivative to every leaf module (``layer_lee``): ``True`` (or
            ``"exact"``) computes each contribution exactly, one extra forward-mode pass per
            leaf-module call (about (calls + 2)× the cost of LEE alone); ``"probes"`` estimates
            them without bias from ``probes`` Gaussian probes, one backward pass each, a cost that
            does not grow with the depth (for deep models); ``False``: LEE alone.
        probes: Gaussian probes for ``layers="probes"`` (the estimate's relative standard
            deviation is sqrt(2 / probes) per sample and layer).
        method: ``"jvp"`` (forward-mode derivative through the model, exact) or ``"difference"``
            (a symmetric difference of the whole composite, for models without forward-mode
            derivatives such as ONNX sessions; no layer attribution).
        step: the symmetric difference's step in the generator's unit (default: the farthest
            pixel moves by 1e-3 px, :func:`orbitscope.lie.default_step`).
        scores: a classifier's output as differentiated: ``"probabilities"`` (default, as
            Gruver et al.) or ``"raw"`` (the scores as returned); see
            :data:`orbitscope.lie.derivative.Scores`.

    Returns:
        A :class:`~orbitscope.Run` whose result has dims ``(sample, generator)`` (and ``layer``).
    """
    task = task or Classification()
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must be an orbitscope Task (e.g. Classification()), got {type(task).__name__}")
    names = [generators] if isinstance(generators, str) else list(generators or default_generators(task.input_kind))
    if not names:
        raise SpecError("give at least one generator, e.g. generators=['rotation']")
    gens = [get_generator(g) for g in names]
    for g in gens:
        check_generator(g, task.input_kind)
    if batch_size < 1:
        raise SpecError(f"batch_size must be >= 1, got {batch_size}")
    if layers not in (False, True, "exact", "probes"):
        raise SpecError(f"layers must be True/'exact', 'probes' or False, got {layers!r}")
    mode = "exact" if layers in (True, "exact") else layers
    if mode and method != "jvp":
        raise SpecError("layers=True needs method='jvp'; pass layers=False with method='difference'")
    if mode == "probes" and not (isinstance(probes, int) and probes >= 1):
        raise SpecError(f"probes must be a positive number of Gaussian probes, got {probes!r}")
    if step is not None and not (np.isfinite(step) and step > 0):
        raise SpecError(f"step must be a positive number in the generator's unit, got {step!r}")
    device = torch.device(device) if device is not None else model_device(model)
    source = DataSource(data, batch_size, data_id, collate=task.collate)
    norm = Normalizer(normalize, device)
    input_kind = get_kind(task.input_kind)
    mhash = model_hash(model)
    config = {
        "measure": "lee", "result_format": 2, "model_hash": mhash,
        "model_arch": hashlib.sha256(repr(model).encode()).hexdigest()[:16],
        "data_id": source.data_id, "n_samples": source.n, "task": task.spec(), "generators": names,
        "chunk_size": source.chunk_size, "normalize": norm.spec, "interpolation": interpolation, "padding": padding,
        "view_size": None if view_size is None else [int(v) for v in view_size], "layers": mode == "exact",
        "method": method, "step": step,
    }
    if scores != "probabilities":  # enters the identity only when not the default
        config["scores"] = scores
    if mode == "probes":
        config.update(layers="probes", probes=int(probes))
    run_id = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    model_name = model_name or getattr(model, "name", None) or type(model).__name__
    attrs = {
        "measure": "lee", "model_name": model_name, "model_id": f"{type(model).__name__}-{mhash}", "model_hash": mhash,
        "model_class": f"{type(model).__module__}.{type(model).__qualname__}", "data_id": source.data_id,
        "task": task.spec(), "generators": names, "generator_units": [g.unit for g in gens],
        "orbit": {"kind": "lie", "generators": names}, "orbit_dims": ["generator"], "identity_index": -1,
        "normalize": norm.spec, "interpolation": interpolation, "padding": padding, "method": method, "step": step,
        "scores": scores, "layer_method": mode or "none", "probes": int(probes) if mode == "probes" else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": str(device),
        "versions": {"torch": torch.__version__},
    }
    name = name or f"{model_name}-lee"
    options: dict[str, Any] = {"interpolation": interpolation, "padding": padding}
    if view_size is not None:
        options["view_size"] = (int(view_size[0]), int(view_size[1]))
    st = open_store(store) if store is not None else None
    with ExitStack() as stack:
        stack.enter_context(eval_mode(model))
        skip: set[int] = set()
        if st is not None:
            stack.enter_context(st.run_lock(run_id))
            rec = st.find_run(run_id)
            if rec is not None and resume and rec.complete:
                if progress is not None:
                    progress(rec.n_samples or 0, rec.n_samples)
                return Run(st.load(run_id), run_id, st, reused=True)
            if rec is not None and resume:
                skip = st.done_chunks(run_id)
            elif rec is not None:
                st.delete_run(run_id)
        layout: dict[str, Any] | None = None
        parts: dict[str, list[np.ndarray]] = {}
        samples: list[np.ndarray] = []
        done = sum(min(source.chunk_size, (source.n or 0) - c * source.chunk_size) for c in skip)
        for index, start, (inputs, _targets) in source.chunks(skip):
            x = input_kind.prepare(inputs, device)
            b = input_kind.batch_size(x)
            context = dict(options)  # lie_terms adds the input's frame size
            lee = np.empty((b, len(gens)))
            layer_lee: np.ndarray | None = None
            layer_names: list[str] = []
            layer_types: list[str] = []
            for j, g in enumerate(gens):
                terms = lie_terms(model, task, x, g, context=context, normalize=norm, step=step, method=method,
                                  layers=mode, scores=scores, probes=probes, seed=index)
                lee[:, j] = terms.lee.cpu().numpy()
                if terms.layer_lee is not None:
                    if layer_lee is None:
                        layer_names, layer_types = terms.layers, terms.layer_types or []
                        layer_lee = np.empty((b, len(gens), len(layer_names)))
                    layer_lee[:, j] = terms.layer_lee.cpu().numpy()
            arrays = {"lee": lee} | ({"layer_lee": layer_lee} if layer_lee is not None else {})
            if layout is None:
                layout = _layout(names, layer_names, arrays)
                attrs["layers"], attrs["layer_types"] = layer_names, layer_types
            if st is not None:
                if st.find_run(run_id) is None:
                    st.create_run(run_id, name=name, model_id=attrs["model_id"], data_id=source.data_id,
                                  orbit=attrs["orbit"], task=task.spec(), layout=layout, attrs=attrs,
                                  n_samples=source.n, chunk_size=source.chunk_size)
                st.write_chunk(run_id, index, start, arrays)
            else:
                for k, v in arrays.items():
                    parts.setdefault(k, []).append(v)
                samples.append(np.arange(start, start + b))
            done += b
            if progress is not None:
                progress(done, source.n)
        if st is not None:
            if st.find_run(run_id) is None:
                raise DataError("the dataset is empty: nothing to differentiate")
            st.finish_run(run_id, done)
            return Run(st.load(run_id), run_id, st)
        if layout is None:
            raise DataError("the dataset is empty: nothing to differentiate")
        out_attrs = dict(attrs, run_id=run_id, run_name=name, status="complete", n_samples=done)
        return Run(assemble_result(layout, parts, np.concatenate(samples), out_attrs), run_id, None)


def _layout(generators: list[str], layers: list[str], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    coords: dict[str, Any] = {"generator": list(generators)}
    if layers:
        coords["layer"] = list(layers)
    variables = {name: {"dtype": str(a.dtype), "extra_dims": list(LEE_VARIABLES[name].extra_dims),
                        "extra_shape": list(a.shape[2:]), "meta": LEE_VARIABLES[name].to_json()}
                 for name, a in arrays.items()}
    return {"orbit_dims": ["generator"], "orbit_shape": [len(generators)], "coords": coords, "variables": variables}

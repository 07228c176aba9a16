"""The evaluation engine: stream a dataset, expand each batch over an orbit, run, score, store.

For every chunk of ``batch_size`` samples the engine warps the chunk by all orbit elements in
batched ``grid_sample`` calls (the batch folded into channels, one grid per element), feeds the
model slices of about ``forward_batch`` transformed images under ``torch.inference_mode``, scores
them with the task, and writes the chunk's arrays (sample × orbit element) to the store before
moving on. Peak memory is bounded by one chunk, independent of the dataset's size. A run is
identified by what determines its numbers (model weights, data, orbit, task, chunking,
normalisation, interpolation); evaluating the same thing again resumes an interrupted run or
returns a finished one from the store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.collate import default_collate

from ..kinds.actions import warp_images
from ..errors import DataError, ModelError
from .activations import ActivationProbe
from ..group.orbits import Orbit
from ..results.result import OrbitResult, assemble_result
from ..results.store import Store, open_store
from ..tasks.base import Classification, Task, Variable

__all__ = ["evaluate", "Run", "ModelError", "DataError"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int | None], None]


@dataclass
class Run:
    """An evaluation: its result, and where it is stored (``store`` is None when in memory)."""

    result: OrbitResult
    run_id: str
    store: Store | None = None
    reused: bool = False

    def summary(self, variable: str = "correct") -> dict[str, Any]:
        return self.result.summary(variable)


# ---------------------------------------------------------------------------------------------
# data sources
# ---------------------------------------------------------------------------------------------


class _Source:
    """Uniform chunked access to arrays, map-style datasets and data loaders."""

    def __init__(self, data: Any, batch_size: int, data_id: str | None) -> None:
        self.loader: DataLoader | None = None
        self.dataset: Dataset | None = None
        if isinstance(data, DataLoader):
            if data.batch_size is None:
                raise DataError("a DataLoader given to evaluate needs a fixed batch_size")
            if not isinstance(data.sampler, torch.utils.data.SequentialSampler):
                raise DataError(
                    "a DataLoader given to evaluate must not shuffle or use a custom sampler: results are indexed "
                    "by position and runs resume by chunk (use shuffle=False)"
                )
            self.loader = data
            self.chunk_size = int(data.batch_size)
            try:
                self.n: int | None = len(data.dataset)  # type: ignore[arg-type]
            except TypeError:
                self.n = None
            inner = data.dataset
        elif isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data, Dataset):
            images, targets = (torch.as_tensor(np.asarray(a)) if not isinstance(a, Tensor) else a for a in data)
            if len(images) != len(targets):
                raise DataError(f"images and targets differ in length: {len(images)} vs {len(targets)}")
            self.dataset = torch.utils.data.TensorDataset(images, targets)
            self.chunk_size, self.n = batch_size, len(images)
            inner = None
            data_id = data_id or "arrays:" + _hash_arrays(images, targets)
        elif isinstance(data, Dataset) and hasattr(data, "__getitem__") and hasattr(data, "__len__"):
            self.dataset = data
            self.chunk_size, self.n = batch_size, len(data)  # type: ignore[arg-type]
            inner = data
        else:
            raise TypeError(
                "data must be a torch Dataset of (input, target), a DataLoader, or a pair (images, targets) of "
                f"arrays; got {type(data).__name__}"
            )
        self.data_id = data_id or getattr(inner, "data_id", None) or f"{type(inner).__name__}:{self.n}"

    def input_numel(self) -> int | None:
        """Values per input (C·H·W), probed once from the first item; None for loaders."""
        if not hasattr(self, "_numel"):
            has_item = self.dataset is not None and (self.n or 0) > 0
            self._numel = int(torch.as_tensor(self.dataset[0][0]).numel()) if has_item else None  # type: ignore[index]
        return self._numel

    def chunks(self, skip: set[int]) -> Iterator[tuple[int, int, Any]]:
        """Yield (chunk index, first sample index, collated batch) for chunks not in ``skip``."""
        if self.loader is not None:
            start = 0
            for i, batch in enumerate(self.loader):
                size = len(batch[0])
                if i not in skip:
                    yield i, start, batch
                start += size
            return
        assert self.dataset is not None and self.n is not None
        for i, start in enumerate(range(0, self.n, self.chunk_size)):
            if i in skip:
                continue
            stop = min(start + self.chunk_size, self.n)
            yield i, start, default_collate([self.dataset[j] for j in range(start, stop)])


def _hash_arrays(*arrays: Tensor) -> str:
    h = hashlib.sha256()
    for a in arrays:
        t = a.detach().cpu().contiguous()
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def _prepare_images(x: Any, device: torch.device) -> Tensor:
    x = torch.as_tensor(x)
    if x.ndim == 3:
        raise DataError(f"inputs must be (B, C, H, W); got (B, H, W) = {tuple(x.shape)}: add a channel dim")
    if x.ndim != 4:
        raise DataError(f"inputs must be images (B, C, H, W), got shape {tuple(x.shape)}")
    if x.dtype == torch.uint8:
        x = x.float() / 255.0
    elif not x.is_floating_point():
        raise DataError(f"images must be float in [0, 1] or uint8, got {x.dtype}")
    x = x.to(device=device, dtype=torch.float32)
    lo, hi = float(x.min()), float(x.max())
    if lo < -1e-6 or hi > 1 + 1e-6:
        raise DataError(
            f"images must be in [0, 1] before model normalisation (found values in [{lo:.3g}, {hi:.3g}]); "
            "pass un-normalised images and give the model's normalisation as normalize=(mean, std)"
        )
    return x


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------


def _forward(model: nn.Module, x: Tensor, channels_last: bool) -> Tensor:
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    try:
        out = model(x)
    except (RuntimeError, ValueError, TypeError, AssertionError) as exc:
        raise ModelError(
            f"the model failed on a batch of shape {tuple(x.shape)} (B, C, H, W) after the orbit transform "
            f"and normalisation: {exc}. Check that the model accepts inputs of this channel count and size "
            "(a torch.export graph needs a dynamic batch dimension: export with dynamic_shapes)."
        ) from exc
    if not isinstance(out, Tensor):
        raise ModelError(f"the model must return a tensor of scores, got {type(out).__name__}")
    return out


def _model_identity(model: nn.Module) -> tuple[str, str]:
    from ..models.reference import model_hash

    h = model_hash(model)
    return h, f"{type(model).__name__}-{h}"


# ---------------------------------------------------------------------------------------------
# evaluate
# ---------------------------------------------------------------------------------------------


def evaluate(
    model: nn.Module,
    data: Any,
    orbit: Orbit,
    task: Task | None = None,
    *,
    store: Store | str | None = None,
    name: str | None = None,
    model_name: str | None = None,
    data_id: str | None = None,
    batch_size: int = 256,
    forward_batch: int = 512,
    memory_budget_mb: float = 1024.0,
    device: str | torch.device | None = None,
    normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    interpolation: str = "bilinear",
    padding: str = "zeros",
    optimize: bool = False,
    seed: int = 0,
    store_inputs: bool | None = None,
    activations: ActivationProbe | Sequence[str] | None = None,
    resume: bool = True,
    progress: Progress | None = None,
) -> Run:
    """Evaluate ``model`` on every sample of ``data`` transformed by every element of ``orbit``.

    Args:
        model: a PyTorch module mapping images (B, C, H, W) to outputs the task reads (for
            classification: (B, classes) logits or probabilities).
        data: a map-style torch Dataset of (image (C, H, W) in [0, 1], target), a DataLoader with a
            fixed batch size, or a pair (images (N, C, H, W), targets (N,)) of arrays/tensors.
        orbit: the group sample, e.g. ``Rotation(range(0, 361, 5))``; its dims become result dims.
        task: how outputs are scored (default :class:`Classification`).
        store: a :class:`Store` or its directory, to write the run chunk by chunk (resumable);
            None keeps the result in memory only.
        name: a human-readable run name (default ``<model>-<orbit kind>``).
        batch_size: samples per chunk (the unit of storage and of resumption).
        forward_batch: transformed images per model call (capped by ``memory_budget_mb``, which
            assumes activations of at most 64× the input size per image).
        device: where warping and the model run (default: the model's device).
        normalize: ``(mean, std)`` per channel, applied after the orbit transform.
        interpolation, padding: image resampling (see :func:`orbitscope.kinds.actions.warp_images`).
        optimize: fold BatchNorm into convolutions and use channels_last (eval-mode numerics are
            unchanged up to float rounding).
        seed: seeds torch's RNG per chunk, so results do not depend on where a run resumed.
        store_inputs: keep each untransformed input as uint8 (variable ``input``, sample ×
            channel × y × x) so views can show it and re-transform it; default: only when an
            input has at most 3 × 128 × 128 values. The target is always kept (``label``).
        activations: also record statistics of intermediate activations (an
            :class:`~orbitscope.engine.activations.ActivationProbe`, or layer names for all statistics),
            captured with forward hooks in the same pass: variable ``activation`` with dims
            ``(sample, *orbit dims, layer, stat)``. Not combinable with ``optimize=True`` (folding
            BatchNorm would change what a convolution's output means).
        resume: reuse a finished run / continue an unfinished one with the same identity.
        progress: called as ``progress(samples_done, n_samples)`` after each chunk.

    Returns:
        A :class:`Run` with ``result`` (an :class:`OrbitResult`: sample × orbit dims).
    """
    task = task or Classification()
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(orbit, Orbit):
        raise TypeError(f"orbit must be an orbitscope Orbit (e.g. Rotation(...)), got {type(orbit).__name__}")
    if task.input_kind != "image":
        raise ValueError(f"the engine evaluates image inputs; task {task.kind!r} needs {task.input_kind!r}")
    if batch_size < 1 or forward_batch < 1:
        raise ValueError("batch_size and forward_batch must be >= 1")
    from ..models.reference import eval_mode, model_device

    device = torch.device(device) if device is not None else model_device(model)
    source = _Source(data, batch_size, data_id)
    transforms = orbit.transforms()
    if transforms.dim != 2:
        raise ValueError(f"orbit {orbit!r} acts in 3-D and cannot act on images")
    norm = _normalizer(normalize, device)
    probe: ActivationProbe | None = None
    if activations is not None:
        if optimize:
            raise ValueError("activations cannot be recorded with optimize=True (BatchNorm folding changes the "
                             "hooked layers' outputs); use optimize=False")
        probe = activations if isinstance(activations, ActivationProbe) else ActivationProbe(tuple(activations))
        probe = probe.resolve(model)

    with eval_mode(model):  # each submodule's mode is restored exactly afterwards
        mhash, mid = _model_identity(model)
        run_model: nn.Module = model
        if optimize:
            from ..models.reference import optimize_for_inference

            run_model = optimize_for_inference(model, fold_bn=True, channels_last=True)
        run_model = run_model.to(device)
        keep_inputs = store_inputs if store_inputs is not None else _small_inputs(source)
        config = {
            "result_format": 2,  # bump when the stored variables change
            "store_inputs": keep_inputs,
            "model_hash": mhash,
            # parameter-free layers (activations, pooling) are invisible to the weight hash
            "model_arch": hashlib.sha256(repr(model).encode()).hexdigest()[:16],
            "optimize": optimize,
            "data_id": source.data_id,
            "n_samples": source.n,
            "orbit": orbit.spec(),
            "task": task.spec(),
            "chunk_size": source.chunk_size,
            "normalize": [list(map(float, v)) for v in normalize] if normalize else None,
            "interpolation": interpolation,
            "padding": padding,
            "seed": seed,
        }
        if probe is not None:  # only when used, so run ids without probes stay as they were
            config["activations"] = probe.spec()
        run_id = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
        model_name = model_name or getattr(model, "name", None) or type(model).__name__
        attrs = {
            "model_name": model_name,
            "model_id": mid,
            "model_hash": mhash,
            "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
            "data_id": source.data_id,
            "orbit": orbit.spec(),
            "orbit_dims": list(orbit.dims),
            "task": task.spec(),
            "normalize": config["normalize"],
            "interpolation": interpolation,
            "padding": padding,
            "optimize": optimize,
            "seed": seed,
            "activations": probe.spec() if probe is not None else None,
            "identity_index": orbit.identity_index() if orbit.identity_index() is not None else -1,
            "versions": _versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "device": str(device),
        }
        st = open_store(store) if store is not None else None
        skip: set[int] = set()
        if st is not None:
            rec = st.find_run(run_id)
            if rec is not None and resume:
                if rec.complete:
                    if progress is not None:
                        progress(rec.n_samples or 0, rec.n_samples)
                    return Run(st.load(run_id), run_id, st, reused=True)
                skip = st.done_chunks(run_id)
                log.info("resuming run %s: %d chunks already written", run_id, len(skip))
            elif rec is not None:
                st.delete_run(run_id)
            st.register_model(mid, model_name, mhash, {"class": attrs["model_class"]})
        name = name or f"{model_name}-{orbit.kind}"
        fb = _forward_batch(forward_batch, memory_budget_mb, source)
        parts: dict[str, list[np.ndarray]] = {}
        layout: dict[str, Any] | None = None
        samples: list[np.ndarray] = []
        done = 0 if not skip else sum(min(source.chunk_size, (source.n or 0) - c * source.chunk_size) for c in skip)
        created = False
        for chunk, start, batch in source.chunks(skip):
            images, targets = batch[0], batch[1]
            x = _prepare_images(images, device)
            with torch.random.fork_rng(devices=[]), torch.inference_mode():
                torch.manual_seed(seed + chunk)
                arrays = _evaluate_chunk(run_model, x, torch.as_tensor(targets), transforms, orbit, task, norm, fb,
                                         interpolation, padding, optimize, start, probe)
            arrays["label"] = torch.as_tensor(targets).cpu().numpy().astype(np.int64).reshape(len(x))
            if keep_inputs:
                arrays["input"] = _quantise(x)
            if layout is None:
                layout = _layout(orbit, task, arrays, probe)
            if st is not None:
                if not created:
                    st.create_run(run_id, name=name, model_id=mid, data_id=source.data_id, orbit=orbit.spec(),
                                  task=task.spec(), layout=layout, attrs=attrs, n_samples=source.n,
                                  chunk_size=source.chunk_size)
                    created = True
                st.write_chunk(run_id, chunk, start, arrays)
            else:
                for k, v in arrays.items():
                    parts.setdefault(k, []).append(v)
                samples.append(np.arange(start, start + len(x)))
            done += len(x)
            if progress is not None:
                progress(done, source.n)
        if st is not None:
            if not created and st.find_run(run_id) is None:
                raise DataError("the dataset is empty: nothing to evaluate")
            st.finish_run(run_id, done)
            return Run(st.load(run_id), run_id, st)
        if layout is None:
            raise DataError("the dataset is empty: nothing to evaluate")
        attrs.update(run_id=run_id, run_name=name, status="complete", n_samples=done)
        return Run(assemble_result(layout, parts, np.concatenate(samples), attrs), run_id, None)


def _evaluate_chunk(
    model: nn.Module, x: Tensor, targets: Tensor, transforms: Any, orbit: Orbit, task: Task,
    norm: Callable[[Tensor], Tensor], fb: int, interpolation: str, padding: str, channels_last: bool, start: int,
    probe: ActivationProbe | None = None,
) -> dict[str, np.ndarray]:
    """All orbit elements for one chunk -> {variable: (B, *orbit.shape, *extra)} arrays."""
    b, k = x.shape[0], len(transforms)
    per_call = max(1, fb // b)  # elements per warp call
    out: dict[str, np.ndarray] = {}
    for k0 in range(0, k, per_call):
        k1 = min(k, k0 + per_call)
        warped = warp_images(x, transforms[k0:k1], layout="orbit", interpolation=interpolation, padding=padding)  # type: ignore[arg-type]
        flat = norm(warped.reshape((k1 - k0) * b, *x.shape[1:]))
        with probe.attach(model) if probe is not None else nullcontext([]) as collected:
            outputs = torch.cat([_forward(model, flat[s : s + fb], channels_last) for s in range(0, len(flat), fb)])
        bad = ~torch.isfinite(outputs.reshape(len(outputs), -1)).all(dim=1)
        if bool(bad.any()):
            first = int(torch.nonzero(bad)[0])
            raise ModelError(
                f"the model returned NaN/inf for sample {start + first % b} at orbit element {k0 + first // b} "
                f"({int(bad.sum())} of {len(outputs)} outputs in this batch); check the model and its inputs"
            )
        scores = task.score(outputs, targets.repeat(k1 - k0))
        if probe is not None:
            scores["activation"] = torch.cat(collected)
            collected.clear()
        for name, val in scores.items():
            v = val.detach().cpu().numpy().reshape(k1 - k0, b, *val.shape[1:])
            if name not in out:
                out[name] = np.empty((b, k, *val.shape[1:]), dtype=v.dtype)
            out[name][:, k0:k1] = np.moveaxis(v, 0, 1)
    return {n: a.reshape(b, *orbit.shape, *a.shape[2:]) for n, a in out.items()}


_PER_SAMPLE = {"label": [], "input": ["channel", "y", "x"]}


def _quantise(x: Tensor) -> np.ndarray:
    """Inputs in [0, 1] -> uint8 (round(255 x)); lossless for 8-bit source images."""
    return torch.round(x * 255).clamp(0, 255).to(torch.uint8).cpu().numpy()


def _layout(orbit: Orbit, task: Task, arrays: dict[str, np.ndarray], probe: ActivationProbe | None = None) -> dict[str, Any]:
    nd = len(orbit.dims)
    variables: dict[str, Any] = {}
    declared = {v.name: v for v in task.variables(0)}
    coords: dict[str, Any] = {d: orbit.coords[d].tolist() for d in orbit.dims}
    if probe is not None:
        declared["activation"] = Variable("activation", "float32", ("layer", "stat"))
        coords.update(layer=list(probe.layers), stat=list(probe.stats))
    for name, a in arrays.items():
        if name in _PER_SAMPLE:
            variables[name] = {"dtype": str(a.dtype), "extra_dims": _PER_SAMPLE[name],
                               "extra_shape": list(a.shape[1:]), "per_sample": True}
            continue
        extra_shape = list(a.shape[1 + nd :])
        extra_dims = list(declared[name].extra_dims) if name in declared else [f"{name}_dim{i}" for i in range(len(extra_shape))]
        variables[name] = {"dtype": str(a.dtype), "extra_dims": extra_dims, "extra_shape": extra_shape}
    return {
        "orbit_dims": list(orbit.dims),
        "orbit_shape": list(orbit.shape),
        "coords": coords,
        "variables": variables,
    }


def _normalizer(normalize: Any, device: torch.device) -> Callable[[Tensor], Tensor]:
    if normalize is None:
        return lambda t: t
    try:
        mean, std = normalize
        m = torch.as_tensor(mean, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)
        s = torch.as_tensor(std, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"normalize must be (mean, std) sequences, one value per channel: {exc}") from exc
    if bool((s <= 0).any()):
        raise ValueError(f"normalisation std must be > 0, got {std}")
    return lambda t: (t - m) / s


def _small_inputs(source: _Source) -> bool:
    numel = source.input_numel()
    return numel is not None and numel <= 3 * 128 * 128


def _forward_batch(forward_batch: int, memory_budget_mb: float, source: _Source) -> int:
    numel = source.input_numel()
    if numel is None:
        return forward_batch
    per_image = numel * 4 * 64
    return int(max(1, min(forward_batch, memory_budget_mb * 2**20 // per_image)))


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("orbitscope", "torch", "numpy", "xarray"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:  # pragma: no cover
            out[pkg] = "unknown"
    return out

"""Dense flow estimation (PIV, optical flow): does the estimate commute with the symmetries?

NERO's PIV case study (seeds.md, "NERO — PIV"): transform an image pair by an element of D4 ×
time reversal (the frames turned or mirrored, and swapped under time reversal), estimate, and
compare with the ground truth moved by the same element (vectors turned or mirrored, negated
under time reversal; :mod:`orbitscope.kinds.flow`).

Input: image pairs (B, 2, C, H, W) in [0, 1] (the ``frames`` kind). Output: a dense flow field
(B, 2, H', W') of (u, v) in pixels per frame, u along +x, v along +y (down). An estimator that
answers at another resolution is resampled bilinearly to the target's (H, W) and its vectors
scaled by W / W' and H / H'. Target: the ground-truth field (B, 2, H, W); NaN marks pixels
without ground truth (an unlabelled pair is all NaN), which every metric ignores, and so are
pixels the element brings in from outside the field (a quarter turn of a non-square pair): the
moved truth has no value there, whatever the run's padding.

Error definitions, per pixel p, with Δ = (Δu, Δv) = estimate − truth:

* ``epe`` — endpoint error |Δ|₂ = sqrt(Δu² + Δv²) (NERO's "AEE", average endpoint error, when
  averaged; NERO's AEE option crashed in its code);
* ``mse`` — (Δu² + Δv²) / 2, the squared error averaged over the two components (NERO's MSE map);
* ``mae`` — (|Δu| + |Δv|) / 2 (what NERO's code drew as its "RMSE" map: a slip);
* ``rmse`` — sqrt(mean over pixels of the MSE map): one number per field (a root-mean-square
  error has no per-pixel map).

Per sample and element the task records each metric's mean over the pixels with ground truth
(px, or px² for ``mse``), and the per-pixel maps named in ``maps`` (default the EPE map), block
averaged to at most ``map_size`` pixels a side (NERO's mosaic draws them).

Consensus (label-free, NERO's): the 16 estimates mapped back by g⁻¹ and averaged (repeated
elements counted once), then moved by each element and scored as if it were the truth
(``consensus_epe`` …); the consensus field itself is stored per sample (``consensus_flow``,
canonical frame). Self-consistency, not correctness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import DataError, ModelError
from ..group.elements import Transforms
from .base import Task, register_task
from .variables import Variable

__all__ = ["Flow", "FLOW_METRICS", "flow_error_maps", "resample_flow"]

#: the metrics, in order: name -> (label, unit, description)
FLOW_METRICS: dict[str, tuple[str, str, str]] = {
    "epe": ("EPE", "px", "endpoint error |Δ|₂, mean over pixels (NERO's AEE)"),
    "rmse": ("RMSE", "px", "sqrt of the mean over pixels of (Δu² + Δv²) / 2"),
    "mae": ("MAE", "px", "(|Δu| + |Δv|) / 2, mean over pixels (NERO's 'RMSE' map)"),
    "mse": ("MSE", "px²", "(Δu² + Δv²) / 2, mean over pixels"),
}
_MAPS = ("epe", "mae", "mse")


def flow_error_maps(estimate: Tensor, truth: Tensor) -> dict[str, Tensor]:
    """Per-pixel error maps (R, H, W) of ``estimate`` against ``truth`` (both (R, 2, H, W)):
    ``epe``, ``mae``, ``mse`` (see the module docstring); NaN where the truth is NaN."""
    d = estimate - truth
    sq = d[:, 0] ** 2 + d[:, 1] ** 2
    return {"epe": sq.sqrt(), "mae": (d[:, 0].abs() + d[:, 1].abs()) / 2, "mse": sq / 2}


def resample_flow(flow: Tensor, size: tuple[int, int]) -> Tensor:
    """(R, 2, h, w) -> (R, 2, H, W): bilinear, vectors scaled to the new pixel size (how the task
    reads estimates made at another resolution)."""
    h, w = flow.shape[-2:]
    if (h, w) == tuple(size):
        return flow
    out = F.interpolate(flow, size=size, mode="bilinear", align_corners=False)
    scale = torch.tensor([size[1] / w, size[0] / h], dtype=flow.dtype, device=flow.device)
    return out * scale[None, :, None, None]


def _inside_share(g: Transforms, size: tuple[int, int], *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> Tensor | None:
    """The share of each pixel's source that lies inside a field of ``size`` (H, W) under each
    element of ``g``: (len(g), 1, H, W), 1 inside and below 1 where the element brings in pixels
    from outside (zero padding). None when every pixel of every element is inside (e.g. D4 on a
    square field): nothing to mask.

    Computed once per distinct geometric element (rows of an orbit evaluation repeat each element
    once per sample) and gathered back to the rows: equal, value for value, to warping a field of
    ones per row."""
    from ..kinds.base import get_kind

    h, w = int(size[0]), int(size[1])
    if len(g) == 0:
        return None
    key = np.concatenate([np.asarray(g.linear, np.float64).reshape(len(g), -1), np.asarray(g.shift, np.float64)], 1)
    _, first, row_of = np.unique(key, axis=0, return_index=True, return_inverse=True)
    geo = g[first]
    geo = Transforms.create(len(geo), linear=geo.linear, shift=geo.shift)  # the grid's part only
    ones = torch.ones(1, 1, h, w, dtype=dtype, device=device)
    share = get_kind("image").act(ones, geo, layout="orbit", padding="zeros")[:, 0]  # (U, 1, H, W)
    if bool((share > 1 - 1e-4).all()):
        return None
    return share[torch.as_tensor(row_of.reshape(-1), device=share.device)]


def _block_mean(maps: Tensor, size: int) -> Tensor:
    """(R, H, W) -> (R, h, w), h, w <= size: mean over blocks of ceil(H / size) pixels (NaN-aware)."""
    h, w = maps.shape[-2:]
    k = max(1, -(-max(h, w) // size))
    if k == 1:
        return maps
    finite = torch.isfinite(maps)
    total = F.avg_pool2d(torch.where(finite, maps, 0.0)[:, None], k, ceil_mode=True)[:, 0]
    count = F.avg_pool2d(finite.to(maps.dtype)[:, None], k, ceil_mode=True)[:, 0]
    return torch.where(count > 0, total / count.clamp_min(1e-12), torch.nan)


@register_task
@dataclass(frozen=True)
class Flow(Task):
    """Dense flow estimation (see the module docstring).

    Args:
        maps: per-pixel error maps to store per sample and element (of ``epe``, ``mae``,
            ``mse``; empty: none).
        map_size: most pixels a side of a stored map (larger fields are block averaged).
    """

    maps: tuple[str, ...] = ("epe",)
    map_size: int = 64
    kind: str = field(default="flow", init=False)
    input_kind = "frames"
    target_kind = "flow"
    output_kind = "flow"
    primary = "epe"
    supports_consensus = True
    consensus_stored = {"consensus_flow": ("component", "flow_y", "flow_x")}

    def __post_init__(self) -> None:
        bad = [m for m in self.maps if m not in _MAPS]
        if bad:
            raise ValueError(f"maps must be among {', '.join(_MAPS)} (RMSE has no per-pixel map), got {bad}")
        if int(self.map_size) < 1:
            raise ValueError(f"map_size must be at least 1 pixel, got {self.map_size}")
        object.__setattr__(self, "maps", tuple(self.maps))

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "Flow":
        return cls(maps=tuple(spec.get("maps", ("epe",))), map_size=int(spec.get("map_size", 64)))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "maps": list(self.maps), "map_size": int(self.map_size)}

    def variables(self, num_outputs: int = 0) -> list[Variable]:
        means = [Variable(name, "float32", description=desc, kind="real", lower_is_better=True, label=label, unit=unit)
                 for name, (label, unit, desc) in FLOW_METRICS.items()]
        maps = [Variable(f"{name}_map", "float32", ("map_y", "map_x"), f"per-pixel {FLOW_METRICS[name][2]}",
                         kind="real", lower_is_better=True, label=f"{FLOW_METRICS[name][0]} map",
                         unit=FLOW_METRICS[name][1]) for name in self.maps]
        return [*means, *maps]

    def canonicalize(self, outputs: Tensor, g: Transforms, **context: Any) -> Tensor:
        """Estimates resampled to the input's resolution (as scored), then mapped back by g⁻¹."""
        size = context.get("image_size")
        if size is not None:
            outputs = resample_flow(outputs.float(), (int(size[0]), int(size[1])))
        return super().canonicalize(outputs, g, **context)

    def store_consensus(self, target: Tensor) -> dict[str, Any]:
        """The consensus field of every sample (canonical frame, (2, H, W) u, v in px/frame)."""
        return {"consensus_flow": target.detach().float().cpu().numpy()}

    def read_outputs(self, raw: Any) -> Tensor:
        """A flow tensor (B, 2, H', W'); a dict's ``flow``/``out`` entry; a tuple's first. Returned
        in the default (contiguous) memory layout: a channels-last field (the optimised model's
        output) would make every per-pixel error map and check after it several times slower."""
        if isinstance(raw, dict):
            raw = raw.get("flow", raw.get("out"))
        if isinstance(raw, (tuple, list)) and raw and isinstance(raw[0], Tensor):
            raw = raw[0]
        if not isinstance(raw, Tensor) or raw.ndim != 4 or raw.shape[1] != 2:
            shape = tuple(raw.shape) if isinstance(raw, Tensor) else type(raw).__name__
            raise ModelError(f"a flow estimator must return (batch, 2, H, W) fields (u, v) in pixels per frame, got "
                             f"{shape}")
        return raw.contiguous()

    def score(self, outputs: Tensor, targets: Tensor, g: Transforms | None = None) -> dict[str, Tensor]:
        if len(outputs) != len(targets):
            raise DataError(f"{len(outputs)} flow estimates but {len(targets)} targets")
        truth = targets.to(outputs.device).float()
        if g is not None:  # truth moved in from outside the field (e.g. a quarter turn of a non-square pair) is unknown
            share = _inside_share(g, tuple(truth.shape[-2:]), dtype=truth.dtype, device=truth.device)
            if share is not None:
                truth = torch.where(share > 1 - 1e-4, truth, torch.nan)
        est = resample_flow(outputs.float(), tuple(truth.shape[-2:]))
        maps = flow_error_maps(est, truth)
        known = torch.isfinite(maps["epe"])
        n = known.sum((1, 2)).float()

        def mean(m: Tensor) -> Tensor:
            total = torch.where(known, m, 0.0).sum((1, 2))
            return torch.where(n > 0, total / n.clamp_min(1), torch.nan)

        out = {"epe": mean(maps["epe"]), "mae": mean(maps["mae"]), "mse": mean(maps["mse"])}
        out["rmse"] = out["mse"].sqrt()
        for name in self.maps:
            out[f"{name}_map"] = _block_mean(maps[name], int(self.map_size))
        return {k: out[k] for k in [*FLOW_METRICS, *(f"{m}_map" for m in self.maps)]}

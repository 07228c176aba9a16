"""How exactly a model keeps a finite symmetry, input size by input size.

An equivariant architecture (a steerable CNN, a group convolution, a symmetrised model) is exact
at a group element only when the element maps the input's pixel grid onto itself *and* every layer
keeps that correspondence. :func:`exactness` measures it: for each input size, random inputs,
and every element of the group, the largest change of the output mapped back,
``max |ρ_out(g)⁻¹ f(ρ_in(g) x) − f(x)|``, with whether the element acts on that size without
interpolation at all.

Why a model can be exact at one input size and not another (90° rotations, mirrors):

* **the input must be square** for a 90° rotation to map the grid onto itself (otherwise the
  rotated image is cropped and padded);
* **padding must be symmetric**: "same" padding with odd kernels is; padding only the right and
  bottom (as NERO's MNIST CNN does, 28 → 29) is not;
* **strided layers need the size to divide**: a stride-2 pooling or convolution in floor mode drops
  the last row and column of an odd-sized map; a rotation turns that dropped edge into a kept one.
  A 28 × 28 input halves to 14 and 7 and stays exact; 29 × 29 does not;
* an even kernel or an even stride offset breaks the centre correspondence in the same way.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import SpecError
from ..group.elements import Transforms
from ..group.orbits import Orbit
from ..kinds.base import get_kind

__all__ = ["exactness"]


def _describe(t: Transforms) -> str:
    """A short name of one planar element: rotation angle or mirror, and shift."""
    lin, shift = t.linear[0], t.shift[0]
    det = float(np.linalg.det(lin))
    if det > 0:
        name = f"rotation {np.degrees(np.arctan2(lin[0, 1], lin[0, 0])) % 360:.6g}°"
    else:
        name = f"mirror {np.round(lin, 6).tolist()}"
    if np.any(np.abs(shift) > 1e-12):
        name += f", shift {np.round(shift, 6).tolist()} px"
    return name


def _inputs(kind: str, n: int, channels: int, size: tuple[int, int], gen: torch.Generator) -> torch.Tensor:
    h, w = size
    if kind == "frames":
        return torch.rand(n, 2, channels, h, w, generator=gen)
    return torch.rand(n, channels, h, w, generator=gen)


def exactness(model: nn.Module, group: Orbit | Transforms | str, input_sizes: Sequence[int | tuple[int, int]], *,
              input_kind: str = "image", output_kind: str = "scores", channels: int = 1, n: int = 4,
              seed: int = 0) -> list[dict[str, Any]]:
    """For every input size and element of ``group``: how far the model is from exact.

    Args:
        model: maps inputs of ``input_kind`` ((n, C, H, W) images, or (n, 2, C, H, W) frame pairs)
            to outputs of ``output_kind`` (``"scores"``: invariant; ``"flow"``: mapped back by the
            vector-field action).
        group: a finite set of planar elements: an :class:`~orbitscope.group.Orbit`, a
            :class:`~orbitscope.group.Transforms` batch or an orbit spec (e.g. ``"rotation90"``,
            ``"d4"``).
        input_sizes: sizes to test, each ``S`` (square) or ``(H, W)``.
        channels: input channels.
        n: random inputs per size, uniform in [0, 1], seeded by ``seed``.

    Returns:
        One row per size and element: ``size`` (H, W), ``element`` (index), ``name``,
        ``exact_action`` (the element acts on this size without interpolation: it maps pixel
        centres onto pixel centres, so a round trip g⁻¹·g·x returns x bit for bit),
        ``max_change`` (largest absolute output change over the inputs) and ``relative_change``
        (divided by max(1, max |f(x)|)), and ``error`` (the model's message where it refuses
        the size, e.g. a symmetrised model and a non-square input; NaN changes then). The module
        docstring lists why a model is exact at one size and not another.
    """
    if isinstance(group, str):
        from ..group.parse import parse_orbit

        group = parse_orbit(group)
    t = group.transforms() if isinstance(group, Orbit) else group
    if not isinstance(t, Transforms):
        raise TypeError(f"group must be an Orbit, a Transforms batch or an orbit spec, got {type(group).__name__}")
    if t.dim != 2:
        raise SpecError("exactness tests planar groups (images, frame pairs); 3-D rotations act exactly on points")
    if input_kind not in ("image", "frames"):
        raise SpecError(f"input_kind must be 'image' or 'frames', got {input_kind!r}")
    if not input_sizes:
        raise SpecError("give at least one input size, e.g. input_sizes=[28, 29]")
    in_kind, out_kind = get_kind(input_kind), get_kind(output_kind)
    gen = torch.Generator().manual_seed(seed)
    rows: list[dict[str, Any]] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for size in input_sizes:
                hw = (int(size), int(size)) if isinstance(size, (int, np.integer)) else (int(size[0]), int(size[1]))
                x = _inputs(input_kind, n, channels, hw, gen)
                try:
                    y0 = model(x)
                except (ValueError, RuntimeError) as exc:  # the model refuses this size: say so, go on
                    rows += [{"size": hw, "element": k, "name": _describe(t[[k]]), "exact_action": False,
                              "max_change": float("nan"), "relative_change": float("nan"),
                              "error": f"{type(exc).__name__}: {exc}"} for k in range(len(t))]
                    continue
                scale = max(1.0, float(y0.abs().max()))
                for k in range(len(t)):
                    g = t[[k]]
                    xg = in_kind.rows(in_kind.act(x, g))
                    back_x = in_kind.rows(in_kind.act(xg, g.inverse()))
                    yg = model(xg)
                    if output_kind != "scores":
                        yg = out_kind.act(yg, g.inverse()[np.zeros(n, dtype=int)], layout="paired")
                    change = float((yg - y0).abs().max())
                    rows.append({"size": hw, "element": k, "name": _describe(g), "exact_action": bool(torch.equal(back_x, x)),
                                 "max_change": change, "relative_change": change / scale, "error": ""})
    finally:
        model.train(was_training)
    return rows

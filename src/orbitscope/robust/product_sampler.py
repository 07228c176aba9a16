"""Products of perturbations: :class:`ProductSampler` (``rotation:15+scale:0.9:1.1``)."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from ..errors import SpecError
from ..kinds import warp_images
from .sampler_base import PerturbationSampler
from .semantic_samplers import SemanticSampler

__all__ = ["ProductSampler"]


class ProductSampler(PerturbationSampler):
    """Several perturbations at once: ``ProductSampler([RandomRotation(15), RandomScale(0.9, 1.1)])``.

    The semantic factors' random elements g1, g2, … are composed into ``g1 ∘ g2 ∘ …`` (the last
    factor acts first) and applied in a single warp, with the first semantic factor's
    interpolation and padding; the pixel-noise factors are then applied in the given order.
    Parameters are drawn factor by factor, in order, from the one generator.
    """

    kind = "product"

    def __init__(self, factors: Sequence[PerturbationSampler]) -> None:
        flat: list[PerturbationSampler] = []
        for f in factors:
            if not isinstance(f, PerturbationSampler):
                raise TypeError(f"product factors must be perturbation samplers, got {type(f).__name__}")
            flat.extend(f.factors if isinstance(f, ProductSampler) else [f])
        if len(flat) < 2:
            raise SpecError(f"a product needs at least two factors, got {len(flat)}")
        self.factors = flat
        self.semantic = [f for f in flat if isinstance(f, SemanticSampler)]
        self.pixel = [f for f in flat if not isinstance(f, SemanticSampler)]

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._prepare(x, generator)
        out = x
        if self.semantic:
            elements = [f.elements(x.shape[0], generator, x.device) for f in self.semantic]
            t = elements[0]
            for e in elements[1:]:
                t = t.compose(e)
            first = self.semantic[0]
            out = warp_images(x, t, layout="paired", interpolation=first.interpolation,  # type: ignore[arg-type]
                              padding=first.padding)
        for f in self.pixel:
            out = f.sample(out, generator)
        return out

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "factors": [f.spec() for f in self.factors]}

    def __str__(self) -> str:
        return "+".join(str(f) for f in self.factors)

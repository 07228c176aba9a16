"""One-parameter subgroups ``t -> g_t`` (their generators X) of every continuous group orbitscope acts with.

A :class:`Generator` names a one-parameter subgroup and its unit of ``t``; ``element(t)`` is
``g_t`` as :class:`~orbitscope.group.Transforms`, so every data kind acts on it through its own
action (:mod:`orbitscope.kinds`), exactly as the orbit evaluation does.

==============  ==========================================  =======================
name            g_t                                         unit of t
==============  ==========================================  =======================
rotation        planar rotation by t, CCW as displayed      radian
translate_x     shift by (t, 0)                             pixel
translate_y     shift by (0, t) (+y down)                   pixel
scale           linear map e^t · I about the image centre   log scale (1 = ×e)
shear           x -> x + t·y                                shear factor
brightness      gain e^t (values multiplied)                log gain
contrast        stretch by e^t about each image's mean      log contrast
so3_x/y/z       3-D rotation by t about the x/y/z axis      radian (right-handed)
==============  ==========================================  =======================

Conventions are the group module's: planar coordinates in pixels from the image centre, +y down;
3-D rotations right-handed. The generator X of a data kind is ``d/dt ρ(g_t) x`` at ``t = 0``;
:func:`orbitscope.lie.tangent` computes it from the kind's action.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .._registry import Registry
from ..errors import SpecError
from ..group.elements import Transforms

__all__ = ["Generator", "GENERATORS", "get_generator", "list_generators", "register_generator", "PLANAR", "SPATIAL"]


def _rotation(t: float) -> Transforms:
    c, s = np.cos(t), np.sin(t)
    return Transforms.create(1, linear=np.array([[[c, s], [-s, c]]]))


def _axis_rotation(axis: int) -> Callable[[float], Transforms]:
    def element(t: float) -> Transforms:
        c, s = np.cos(t), np.sin(t)
        i, j = (axis + 1) % 3, (axis + 2) % 3  # cyclic (y, z), (z, x), (x, y)
        m = np.eye(3)
        m[i, i], m[i, j], m[j, i], m[j, j] = c, -s, s, c  # right-handed about ``axis``
        return Transforms.create(1, linear=m[None], dim=3)
    return element


@dataclass(frozen=True)
class Generator:
    """A one-parameter subgroup ``t -> g_t`` (see the module docstring).

    Attributes:
        name: registry name, e.g. ``"rotation"``.
        unit: the unit of ``t`` (for labels and the LEE's unit, ``output² / unit²``).
        element: ``t -> g_t`` as one :class:`Transforms` element.
        spatial: whether ``g_t`` moves coordinates (it then acts on feature maps too).
        dim: 2 for planar subgroups, 3 for 3-D rotations (point clouds only).
        reach: how far ``g_t`` moves the farthest point of a frame of radius ``r`` per unit ``t``:
            ``reach(r)`` in pixels (or the data's length unit); the finite step of the tangent is
            chosen from it (see :func:`orbitscope.lie.default_step`).
    """

    name: str
    unit: str
    element: Callable[[float], Transforms] = field(repr=False)
    spatial: bool = True
    dim: int = 2
    reach: Callable[[float], float] = field(default=lambda r: 1.0, repr=False)
    description: str = ""

    def transforms(self, ts: np.ndarray) -> Transforms:
        """``g_t`` for every ``t`` of ``ts``, as K elements."""
        return Transforms.concat([self.element(float(t)) for t in np.atleast_1d(ts)])


GENERATORS: Registry[Generator] = Registry("generator")


def register_generator(gen: Generator, *, replace: bool = False) -> Generator:
    """Register a generator under its name."""
    return GENERATORS.register(gen.name, gen, replace=replace)


def list_generators() -> list[str]:
    """Names of the registered generators."""
    return GENERATORS.names()


def get_generator(name: str | Generator) -> Generator:
    """The generator registered as ``name`` (a :class:`Generator` passes through)."""
    if isinstance(name, Generator):
        return name
    if not isinstance(name, str) or name not in GENERATORS:
        raise SpecError(f"unknown generator {name!r}; known: {', '.join(list_generators())} (a new one is a Generator "
                        "registered with register_generator)")
    return GENERATORS.get(name)


for _gen in (
    Generator("rotation", "radian", _rotation, reach=lambda r: r,
              description="planar rotation about the image centre, counter-clockwise as displayed"),
    Generator("translate_x", "pixel", lambda t: Transforms.create(1, shift=np.array([[t, 0.0]])),
              description="horizontal shift, +x right"),
    Generator("translate_y", "pixel", lambda t: Transforms.create(1, shift=np.array([[0.0, t]])),
              description="vertical shift, +y down"),
    Generator("scale", "log scale", lambda t: Transforms.create(1, linear=np.exp(t) * np.eye(2)[None]), reach=lambda r: r,
              description="isotropic scaling about the image centre by e^t"),
    Generator("shear", "shear factor", lambda t: Transforms.create(1, linear=np.array([[[1.0, t], [0.0, 1.0]]])),
              reach=lambda r: r, description="horizontal shear x -> x + t·y"),
    Generator("brightness", "log gain", lambda t: Transforms.create(1, gain=np.exp(t)), spatial=False,
              description="values multiplied by e^t (then clipped to [0, 1] by the image action)"),
    Generator("contrast", "log contrast", lambda t: Transforms.create(1, contrast=np.exp(t)), spatial=False,
              description="values stretched by e^t about each image's mean"),
    Generator("so3_x", "radian", _axis_rotation(0), dim=3, reach=lambda r: r, description="3-D rotation about x"),
    Generator("so3_y", "radian", _axis_rotation(1), dim=3, reach=lambda r: r, description="3-D rotation about y"),
    Generator("so3_z", "radian", _axis_rotation(2), dim=3, reach=lambda r: r, description="3-D rotation about z"),
):
    register_generator(_gen)

#: the planar generators (images, frames, windows, flow fields)
PLANAR = ("rotation", "translate_x", "translate_y", "scale", "shear", "brightness", "contrast")
#: the generators of 3-D rotations (point clouds)
SPATIAL = ("so3_x", "so3_y", "so3_z")

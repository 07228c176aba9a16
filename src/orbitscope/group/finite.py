"""Finite groups acting on planar data: a mirror, the dihedral group D4, time reversal.

Convention:
    Planar coordinates in pixels from the image centre, ``+x`` right, ``+y`` down; an element maps
    ``p -> linear @ p`` (no shift). Rotations are counter-clockwise *as displayed*:
    ``rot90 = [[0, 1], [-1, 0]]`` sends ``+x`` (right) to ``-y`` (up). Every matrix here has
    integer entries in {-1, 0, 1}, so these elements are exact (no interpolation error when they
    act on pixel grids, and compositions are exact). A mirror acts on vector data (flow) through
    the same matrix: the left-right flip ``x -> -x`` negates ``u``, the top-bottom flip negates ``v``.
    Time reversal has identity geometry and sets the ``time_reversed`` flag (the frame and flow
    actions swap the frames and negate the field); it commutes with every geometric element.

The element order of :class:`D4` and of :func:`d4_time_reversal` is the one of NERO's PIV case
study (Zhao, Matsuzawa, Irvine, Maire, Kindlmann, "Non-Equivariance Revealed on Orbits",
arXiv 2305.19889): element ``8·t + d`` is time reversal ``t`` with the D4 element ``d``, laid out
in NERO's 4×4 mosaic as :data:`NERO_MOSAIC`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import SpecError
from .elements import Transforms
from .orbits import Orbit, Product, register_orbit

__all__ = ["Flip", "D4", "TimeReversal", "d4_time_reversal", "NERO_MOSAIC"]

#: NERO's 4×4 PIV mosaic, row by row; each cell holds the element index ``8·t + d`` of
#: :func:`d4_time_reversal`. The middle two columns hold the eight D4 elements; each
#: time-reversed copy sits beside its partner (column 0 = column 1 + 8, column 3 = column 2 + 8).
NERO_MOSAIC: tuple[tuple[int, ...], ...] = ((10, 2, 1, 9), (11, 3, 0, 8), (12, 4, 7, 15), (13, 5, 6, 14))


class FiniteOrbit(Orbit):
    """An orbit whose elements are a fixed list (a finite group): its spec is just its kind."""

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "Orbit":
        return cls()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@register_orbit
class Flip(FiniteOrbit):
    """A mirror and the identity (the group Z2); dim ``flip``: 0 identity, 1 the mirror.

    Args:
        axis: ``"x"`` mirrors left-right (``x -> -x``, a flow's ``u -> -u``); ``"y"`` mirrors
            top-bottom (``y -> -y``, ``v -> -v``).
    """

    kind = "flip"
    dims = ("flip",)
    units = ("index",)
    AXES = ("x", "y")

    def __init__(self, axis: str = "x") -> None:
        if axis not in self.AXES:
            raise SpecError(f"Flip axis must be one of {list(self.AXES)} ('x' mirrors left-right), got {axis!r}")
        self.axis = axis
        self.coords = {"flip": np.array([0.0, 1.0])}

    def transforms(self) -> Transforms:
        mirror = np.diag([-1.0, 1.0]) if self.axis == "x" else np.diag([1.0, -1.0])
        return Transforms.create(2, linear=np.stack([np.eye(2), mirror]))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "axis": self.axis}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "Orbit":
        return cls(spec.get("axis", "x"))

    def __repr__(self) -> str:
        return f"Flip(axis={self.axis!r})"


# D4 in NERO's order. With r = rot90 (counter-clockwise as displayed) and a = the anti-diagonal
# flip, element 2k is r^k and element 2k + 1 is r^k ∘ a.
_D4_MATRICES = np.array(
    [
        [[1, 0], [0, 1]],  # 0 identity
        [[0, -1], [-1, 0]],  # 1 anti-diagonal flip: (x, y) -> (-y, -x)
        [[0, 1], [-1, 0]],  # 2 rot90 counter-clockwise as displayed: (x, y) -> (y, -x)
        [[-1, 0], [0, 1]],  # 3 horizontal flip (left-right): x -> -x
        [[-1, 0], [0, -1]],  # 4 rot180
        [[0, 1], [1, 0]],  # 5 diagonal flip (transpose): (x, y) -> (y, x)
        [[0, -1], [1, 0]],  # 6 rot270: (x, y) -> (-y, x)
        [[1, 0], [0, -1]],  # 7 vertical flip (top-bottom): y -> -y
    ],
    dtype=np.float64,
)


@register_orbit
class D4(FiniteOrbit):
    """The dihedral group of the square (8 exact elements); dim ``d4`` with coords 0..7.

    Order (NERO's, arXiv 2305.19889): 0 identity, 1 anti-diagonal flip ``(x, y) -> (-y, -x)``,
    2 rot90 counter-clockwise as displayed, 3 horizontal flip ``x -> -x``, 4 rot180, 5 diagonal
    flip (transpose) ``(x, y) -> (y, x)``, 6 rot270, 7 vertical flip ``y -> -y``. Writing
    ``r`` = rot90 and ``a`` = the anti-diagonal flip, element ``2k`` is ``r^k`` and ``2k + 1`` is
    ``r^k ∘ a``; :meth:`cayley_table` follows from ``a ∘ r = r^-1 ∘ a``.
    """

    kind = "d4"
    dims = ("d4",)
    units = ("index",)
    NAMES: tuple[str, ...] = ("identity", "antidiagonal", "rot90", "hflip", "rot180", "diagonal", "rot270", "vflip")

    def __init__(self) -> None:
        self.coords = {"d4": np.arange(8, dtype=np.float64)}

    @staticmethod
    def matrices() -> np.ndarray:
        """The eight (2, 2) integer-valued matrices (float64), in element order."""
        return _D4_MATRICES.copy()

    def transforms(self) -> Transforms:
        return Transforms.create(8, linear=self.matrices())

    @staticmethod
    def cayley_table() -> np.ndarray:
        """(8, 8) int table: ``table[i, j]`` is the index of ``g_i ∘ g_j`` (``g_j`` acts first).

        From the presentation: ``(r^k a^s) ∘ (r^m a^t) = r^(k + (-1)^s m) a^(s + t)``.
        """
        i, j = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
        k, s, m, t = i // 2, i % 2, j // 2, j % 2
        return 2 * ((k + (1 - 2 * s) * m) % 4) + (s + t) % 2


@register_orbit
class TimeReversal(FiniteOrbit):
    """Forward and reversed time; dim ``time_reversed``: 0 forward (identity), 1 reversed.

    Element 1 has identity geometry and ``time_reversed=True``: frame pairs are swapped and
    velocities negated by the data actions.
    """

    kind = "time_reversal"
    dims = ("time_reversed",)
    units = ("flag",)

    def __init__(self) -> None:
        self.coords = {"time_reversed": np.array([0.0, 1.0])}

    def transforms(self) -> Transforms:
        return Transforms.create(2, time_reversed=np.array([False, True]))


def d4_time_reversal() -> Product:
    """NERO's 16 PIV elements: ``Product(TimeReversal(), D4())``, dims ``("time_reversed", "d4")``.

    Its flat (C-order) index is NERO's element index ``8·t + d``; :data:`NERO_MOSAIC` lays them
    out in NERO's 4×4 cell order.
    """
    return Product(TimeReversal(), D4())

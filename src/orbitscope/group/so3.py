"""Samples of the 3-D rotation group SO(3), for point clouds.

Convention:
    Right-handed 3-D coordinates; an element maps a point ``p`` (N, 3) to ``R @ p``. Rotations
    are unit quaternions (w, x, y, z); ``q = (cos ψ/2, sin ψ/2 · axis)`` turns by ``ψ``
    counter-clockwise about ``axis`` seen from its tip (the right-hand rule). ``q`` and ``-q``
    are the same rotation. Every orbit here exposes ``.quaternions`` (K, 4) and ``.matrices``
    (K, 3, 3), and its ``transforms()`` have ``dim == 3``.

* :class:`NeroSO3`: NERO's axis–angle sample (arXiv 2305.19889), drawn as one disk per plane.
* :class:`SO3Grid`: ``n`` near-uniform rotations (Alexa's super-Fibonacci spirals, CVPR 2022).
* :class:`RandomSO3`: ``n`` rotations drawn uniformly (Haar measure), seeded.
* :class:`Octahedral`: the exact rotation group of the cube (24 elements).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import SpecError
from .elements import Transforms, quaternion_to_matrix, rotation_matrix
from .grids import check_size, finite_number, inclusive_range
from .finite import FiniteOrbit
from .orbits import Orbit, Rotation3D, register_orbit

__all__ = ["NeroSO3", "SO3Grid", "RandomSO3", "Octahedral", "super_fibonacci", "random_quaternions", "shoemake_quaternions"]


def _cos_sin(angle_deg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of angles in degrees, exact at multiples of 90° (via :func:`rotation_matrix`)."""
    m = rotation_matrix(angle_deg)
    return m[..., 0, 0], m[..., 0, 1]


@register_orbit
class NeroSO3(Orbit):
    """NERO's axis–angle sample of SO(3) (Zhao et al., arXiv 2305.19889, point-cloud study).

    Dims ``("plane", "axis_angle", "rotation_angle")``:

    * ``plane`` 0, 1, 2 for :attr:`PLANES` ``("xy", "xz", "yz")``, the plane holding the axis;
    * ``axis_angle`` φ = 0, ``axis_step``, …, 360 degrees (both ends; 73 values by 5°), the
      in-plane direction of the axis: xy ``(cos φ, sin φ, 0)``, xz ``(cos φ, 0, -sin φ)``,
      yz ``(0, cos φ, sin φ)``;
    * ``rotation_angle`` ψ = 0, ``angle_step``, …, 180 degrees (13 values by 15°), the
      right-handed turn about the axis: ``q = (cos ψ/2, sin ψ/2 · axis)``.

    The default grid has 3 × 73 × 13 = 2,847 elements but only 2,416 distinct rotations: the
    identity (ψ = 0) appears 219 times, φ = 0 and 360 coincide, ψ = 180° about opposite axes
    coincide, and the coordinate axes lie in two planes each. The sample is therefore *not* a
    group and not uniform (it is dense near the identity); average over it with care.
    """

    kind = "so3_nero"
    dims = ("plane", "axis_angle", "rotation_angle")
    units = ("index", "degrees", "degrees")
    PLANES: tuple[str, ...] = ("xy", "xz", "yz")

    def __init__(self, axis_step: float = 5.0, angle_step: float = 15.0) -> None:
        self.axis_step = finite_number(axis_step, "NeroSO3 axis_step")
        self.angle_step = finite_number(angle_step, "NeroSO3 angle_step")
        phi = inclusive_range(0.0, 360.0, self.axis_step, what="NeroSO3 axis angles")
        psi = inclusive_range(0.0, 180.0, self.angle_step, what="NeroSO3 rotation angles")
        check_size(3 * len(phi) * len(psi), "NeroSO3", "use larger axis_step / angle_step")
        self.coords = {"plane": np.arange(3, dtype=np.float64), "axis_angle": phi, "rotation_angle": psi}

        c, s = _cos_sin(phi)
        zero = np.zeros_like(c)
        axes = np.stack(
            [np.stack([c, s, zero], -1), np.stack([c, zero, -s], -1), np.stack([zero, c, s], -1)]
        )  # (3 planes, n_phi, 3)
        half_c, half_s = _cos_sin(psi / 2.0)
        q = np.concatenate(
            [
                np.broadcast_to(half_c[None, None, :, None], (3, len(phi), len(psi), 1)),
                half_s[None, None, :, None] * axes[:, :, None, :],
            ],
            axis=-1,
        )
        self.quaternions = q.reshape(-1, 4)
        self.matrices = quaternion_to_matrix(self.quaternions)

    def transforms(self) -> Transforms:
        return Transforms.create(len(self.matrices), linear=self.matrices, dim=3)

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "axis_step": self.axis_step, "angle_step": self.angle_step}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "Orbit":
        return cls(spec.get("axis_step", 5.0), spec.get("angle_step", 15.0))

    def __repr__(self) -> str:
        return f"NeroSO3(axis_step={self.axis_step:g}, angle_step={self.angle_step:g}; {self.size} rotations)"


#: ψ of the super-Fibonacci spiral: the real root > 1 of ψ⁴ = ψ + 4 (Alexa, CVPR 2022).
_SUPER_FIBONACCI_PSI = float(max(r.real for r in np.roots([1.0, 0.0, 0.0, -1.0, -4.0]) if abs(r.imag) < 1e-12))


def super_fibonacci(n: int) -> np.ndarray:
    """``n`` unit quaternions (n, 4) spread near-uniformly over SO(3), as (w, x, y, z).

    Alexa, "Super-Fibonacci Spirals: Fast, Low-Discrepancy Sampling of SO(3)", CVPR 2022,
    Algorithm 1: with φ = √2, ψ⁴ = ψ + 4, and for i = 0 … n-1, s = i + 1/2, r = √(s/n),
    R = √(1 - s/n), α = 2π s / φ, β = 2π s / ψ, the sample is
    ``(r sin α, r cos α, R sin β, R cos β)``, taken here as (w, x, y, z). Deterministic.
    """
    s = np.arange(n, dtype=np.float64) + 0.5
    r, big_r = np.sqrt(s / n), np.sqrt(1.0 - s / n)
    alpha = 2.0 * np.pi * s / np.sqrt(2.0)
    beta = 2.0 * np.pi * s / _SUPER_FIBONACCI_PSI
    return np.stack([r * np.sin(alpha), r * np.cos(alpha), big_r * np.sin(beta), big_r * np.cos(beta)], -1)


@register_orbit
class SO3Grid(Rotation3D):
    """A deterministic, near-uniform set of ``n`` 3-D rotations; dim ``rotation`` (index 0..n-1).

    ``method="super-fibonacci"`` (the only one so far) uses :func:`super_fibonacci`. The set is
    not a group and in general does not contain the identity (:meth:`identity_index` is None).
    """

    kind = "so3_grid"
    METHODS = ("super-fibonacci",)

    def __init__(self, n: int, method: str = "super-fibonacci") -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise SpecError(f"SO3Grid needs a whole number n >= 1 of rotations, got {n!r}")
        if method not in self.METHODS:
            raise SpecError(f"unknown SO3Grid method {method!r}; known: {', '.join(self.METHODS)}")
        check_size(int(n), "SO3Grid", "use a smaller n")
        self.n, self.method = int(n), method
        super().__init__(super_fibonacci(self.n))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "method": self.method}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "Orbit":
        if "n" not in spec:
            raise SpecError(f"a 'so3_grid' orbit spec needs the key 'n', got {sorted(spec)}")
        return cls(spec["n"], spec.get("method", "super-fibonacci"))

    def __repr__(self) -> str:
        return f"SO3Grid({self.n}, method={self.method!r})"


def random_quaternions(n: int, seed: int = 0) -> np.ndarray:
    """``n`` unit quaternions (n, 4) as (w, x, y, z), uniform on SO(3) (the Haar measure).

    Shoemake, "Uniform random rotations", Graphics Gems III (1992): with u1, u2, u3 ~ U(0, 1),
    ``q = (√(1−u1) sin 2πu2, √(1−u1) cos 2πu2, √u1 sin 2πu3, √u1 cos 2πu3)``; drawn from
    ``numpy.random.default_rng(seed)``, so the same (n, seed) gives the same rotations."""
    return shoemake_quaternions(np.random.default_rng(seed).random((3, int(n))))


def shoemake_quaternions(u: np.ndarray) -> np.ndarray:
    """Shoemake's map from uniforms ``u`` (3, n) in [0, 1) to unit quaternions (n, 4) as
    (w, x, y, z), uniform on SO(3) when ``u`` is (see :func:`random_quaternions`)."""
    u1, u2, u3 = np.asarray(u, dtype=np.float64)
    a, b = np.sqrt(1.0 - u1), np.sqrt(u1)
    return np.stack([a * np.sin(2 * np.pi * u2), a * np.cos(2 * np.pi * u2),
                     b * np.sin(2 * np.pi * u3), b * np.cos(2 * np.pi * u3)], -1)


@register_orbit
class RandomSO3(Rotation3D):
    """``n`` uniformly random 3-D rotations (:func:`random_quaternions`), seeded; dim
    ``rotation`` (index 0..n-1). Not a group; unbiased for means over SO(3), unlike
    :class:`NeroSO3` (dense near the identity)."""

    kind = "so3_random"

    def __init__(self, n: int, seed: int = 0) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise SpecError(f"RandomSO3 needs a whole number n >= 1 of rotations, got {n!r}")
        check_size(int(n), "RandomSO3", "use a smaller n")
        self.n, self.seed = int(n), int(seed)
        super().__init__(random_quaternions(self.n, self.seed))

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "seed": self.seed}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "Orbit":
        if "n" not in spec:
            raise SpecError(f"a 'so3_random' orbit spec needs the key 'n', got {sorted(spec)}")
        return cls(spec["n"], spec.get("seed", 0))

    def __repr__(self) -> str:
        return f"RandomSO3({self.n}, seed={self.seed})"


def _octahedral_quaternions() -> np.ndarray:
    """The 24 rotations of the cube as quaternions (w > 0, or w = 0 and first non-zero > 0).

    Order: identity; 90°, 180°, 270° about x, y, z (9); ±120° about the 4 body diagonals (8);
    180° about the 6 edge axes (6).
    """
    h = np.sqrt(0.5)
    out = [(1.0, 0.0, 0.0, 0.0)]
    for axis in np.eye(3):
        out += [(h, *(h * axis)), (0.0, *axis), (h, *(-h * axis))]
    for sx in (1, -1):
        for sy in (1, -1):
            for sz in (1, -1):
                out.append((0.5, 0.5 * sx, 0.5 * sy, 0.5 * sz))
    for i, j in ((0, 1), (0, 2), (1, 2)):
        for sign in (1.0, -1.0):
            v = np.zeros(3)
            v[i], v[j] = h, sign * h
            out.append((0.0, *v))
    return np.array(out, dtype=np.float64)


@register_orbit
class Octahedral(Rotation3D):
    """The rotation group of the cube (chiral octahedral group O ≅ S4, 24 elements); dim
    ``rotation`` (index). Its matrices are exactly the signed permutation matrices with
    determinant +1 (entries in {-1, 0, 1}); element 0 is the identity.
    """

    kind = "octahedral"

    def __init__(self) -> None:
        super().__init__(_octahedral_quaternions())
        self.matrices = np.rint(self.matrices)  # exact: every entry is -1, 0 or 1

    spec = FiniteOrbit.spec
    from_spec = classmethod(FiniteOrbit.from_spec.__func__)  # type: ignore[attr-defined]
    __repr__ = FiniteOrbit.__repr__

"""A built-in point-cloud shape set made from real meshes that install offline (NERO's point-cloud
case study on data that needs no download).

Conventions:
    A cloud is float32 (N, 3), right-handed (x, y, z), normalised as NERO did: the centroid (mean
    of the N points) at the origin and the largest point norm 1. Every class is in one fixed,
    *canonical* orientation with its up axis along +z; the per-sample augmentation never rotates,
    so a model trained plainly on these clouds has only seen canonically oriented objects (the
    case study measures how its output changes along rotation orbits).

Classes (:data:`MESH_CLASSES`, label = index; :data:`MESH_SOURCES` holds the same table):

==========  ======================================================  ==================================
class       source                                                  canonical frame
==========  ======================================================  ==================================
bunny       ``pybullet_data/bunny.obj`` (the Stanford bunny)        y-up in the file, turned to z-up
duck        ``pybullet_data/duck.obj`` (the COLLADA rubber duck)    y-up in the file, turned to z-up
teddy       ``pybullet_data/teddy2_VHACD_CHs.obj`` (a teddy bear    y-up in the file, turned to z-up
            as 15 convex pieces)
mug         ``pybullet_data/objects/mug.obj`` (mug with a handle)   z-up (as in the file)
ball        ``pybullet_data/soccerball.obj`` (a football)           as in the file
torus       ``pybullet_data/torus/torus_textured.obj`` (a ring)     axis y in the file, turned to z
shelf       ``pybullet_data/kiva_shelf/meshes/pod_lowres.stl`` (a   y-up in the file, turned to z-up
            Kiva storage pod: a tall shelf with compartments)
box         ``trimesh.creation.box(extents=(1.0, 0.7, 0.45))``      z-up
cone        ``trimesh.creation.cone(radius=0.5, height=1.2)``       axis +z, apex up
cylinder    ``trimesh.creation.cylinder(radius=0.3, height=1.4)``   axis z
==========  ======================================================  ==================================

"Turned to z-up" is the fixed rotation by +90° about x, (x, y, z) -> (x, -z, y). Each canonical
mesh is then centred on its bounding-box centre and scaled so that its farthest vertex is at
distance 1.

Left out, on purpose (so that every class is a distinct shape a small classifier can tell apart):
``cube.obj``, ``jenga/jenga.obj``, ``table/table.obj`` and ``table_square/table.obj`` are all unit
cubes (duplicates of *box*); ``lego/lego.obj`` (a brick with studs), ``stone.obj`` (a flat square
frustum), ``domino/domino.obj`` and ``toys/shape_sorter.obj`` are box-like slabs; ``sphere_smooth.obj``,
``textured_sphere_smooth.obj`` and ``trimesh.creation.icosphere`` duplicate *ball*; ``duck_vhacd.obj``
and ``objects/mug_col.obj`` are collision hulls of *duck* and *mug*; ``trimesh.creation.annulus``
and ``capsule`` are too close to *torus* and *cylinder*; ``tray/*.obj`` (a shallow open dish) would
be an eleventh class; ``plane*.obj`` and ``cloth_z_up.obj`` are flat sheets (degenerate as 3-D
shapes); ``samurai_monastry.obj``, ``terrain.obj`` and the stadium files are scenes, not objects;
``random_urdfs/*`` are procedurally random compounds without a class identity; the robot parts
(grippers, arms, legged robots, vehicles) are links of articulated robots rather than objects.
A listed mesh that fails to load, or is degenerate (non-finite vertices, fewer than 4 faces, no
area, or flat: smallest extent under 1 % of the largest), is skipped with a warning that gives the
reason (:func:`skipped_meshes`); the data then carries ``classes=...`` in its ``data_id``.

Sample ``i`` of class ``c`` in split ``s`` is made from two numpy Generators seeded with
``SeedSequence(seed, spawn_key=(split_code, crc32(c), i, j))`` (split_code 0 for "train", 1 for
"test"; j = 0 for the deformation, 1 for the surface points), so it depends on (split, class,
sample index, seed) alone: ``n_per_class=10`` gives the first 10 clouds of ``n_per_class=64``, a
class's clouds do not depend on which other classes are chosen, and its shape (the deformation)
does not depend on ``points``. Train and test use different seed streams (different
``spawn_key`` prefixes), so they are disjoint by construction. Steps (:func:`deform`):

1. area-weighted uniform surface sampling of the canonical mesh (:class:`Surface`);
2. per-axis (anisotropic) scaling, each factor uniform in :data:`AXIS_SCALE` = [0.8, 1.25];
3. taper: x and y multiplied by ``1 + t·z``, t uniform in [-0.2, 0.2] (:data:`TAPER`);
4. bend: x += b_x·z², y += b_y·z², b_x and b_y uniform in [-0.15, 0.15] (:data:`BEND`);
5. overall scale uniform in :data:`OVERALL_SCALE` = [0.8, 1.2];
6. Gaussian jitter, σ = :data:`JITTER_SIGMA` = 0.01 per coordinate (in the units of the canonical
   mesh, whose farthest vertex is at 1; as the last step removes scale, the overall scale of step 5
   only changes the relative noise level, σ/scale, between 0.0083 and 0.0125);
7. normalisation (:func:`normalise_cloud`): centroid to the origin, largest norm 1, float32.

No step rotates. Speed (measured on 2 CPU cores): importing trimesh and loading the 10 meshes
takes about 0.5 s once per process (they are cached); the default train set (64 per class, 640
clouds of 1,024 points) then takes about 0.45 s, the test set (160 clouds) about 0.1 s, and 1,000
clouds 0.7–1.3 s.

Data spec: ``meshes[:train|test][,n=N][,points=P][,seed=K][,classes=A+B][,v=1]`` (defaults test,
n 64 per class for train and 16 for test, 1,024 points, seed 0), e.g. ``meshes:test`` or
``meshes:train,n=40,points=512,seed=0``.

Needs ``trimesh`` and ``pybullet`` (``pip install 'orbitscope[pointcloud]'``), imported only when
the meshes are first loaded.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from ..errors import DataError, SpecError
from .subsets import picked_indices, subset_tag
from .limits import check_data_bytes, check_data_items
from .specs import register_data_spec

__all__ = [
    "GENERATOR_VERSION", "MESH_CLASSES", "MESH_SOURCES", "MeshSource", "AXIS_SCALE", "TAPER", "BEND",
    "OVERALL_SCALE", "JITTER_SIGMA", "DEFAULT_N_PER_CLASS", "Surface", "sample_surface", "normalise_cloud",
    "deform", "canonical_mesh", "make_cloud", "available_classes", "skipped_meshes", "MeshClouds", "mesh_clouds",
    "check_cloud_size", "CLOUD_BYTES_PER_POINT",
]

#: Version of the cloud generator; part of every ``data_id`` (bump it when clouds change).
GENERATOR_VERSION = 1
#: Range of the per-axis scale factors (uniform).
AXIS_SCALE = (0.8, 1.25)
#: Taper coefficient t is uniform in [-TAPER, TAPER]: x, y *= 1 + t·z.
TAPER = 0.2
#: Bend coefficients b_x, b_y are uniform in [-BEND, BEND]: x += b_x·z², y += b_y·z².
BEND = 0.15
#: Range of the overall scale factor (uniform), applied before the jitter.
OVERALL_SCALE = (0.8, 1.2)
#: Standard deviation of the Gaussian jitter per coordinate (canonical-mesh units).
JITTER_SIGMA = 0.01
#: Bytes per point that making one cloud needs at its peak (float64 samples, faces, deformation and
#: normalisation temporaries: 116 measured with tracemalloc), for :func:`check_cloud_size`.
CLOUD_BYTES_PER_POINT = 128
#: Clouds per class when ``n_per_class`` is not given.
DEFAULT_N_PER_CLASS = {"train": 64, "test": 16}
_SPLIT_CODE = {"train": 0, "test": 1}
_INSTALL = "pip install 'orbitscope[pointcloud]'"


@dataclass(frozen=True)
class MeshSource:
    """Where a class's mesh comes from.

    Attributes:
        name: class name.
        kind: ``"pybullet"`` (a file under ``pybullet_data.getDataPath()``) or ``"trimesh"`` (a
            ``trimesh.creation`` primitive).
        source: the file (relative to the pybullet data folder) or the primitive's name.
        params: keyword arguments of the primitive (empty for files).
        up: the file's up axis, ``"y"`` (turned to +z by (x, y, z) -> (x, -z, y)) or ``"z"`` (kept).
        description: what the object is.
    """

    name: str
    kind: Literal["pybullet", "trimesh"]
    source: str
    params: tuple[tuple[str, Any], ...] = ()
    up: Literal["y", "z"] = "z"
    description: str = ""

    def __str__(self) -> str:
        if self.kind == "pybullet":
            return f"pybullet_data/{self.source}"
        args = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"trimesh.creation.{self.source}({args})"


_SOURCES = (
    MeshSource("bunny", "pybullet", "bunny.obj", up="y", description="the Stanford bunny"),
    MeshSource("duck", "pybullet", "duck.obj", up="y", description="a rubber duck"),
    MeshSource("teddy", "pybullet", "teddy2_VHACD_CHs.obj", up="y", description="a teddy bear (15 convex pieces)"),
    MeshSource("mug", "pybullet", "objects/mug.obj", up="z", description="a mug with a handle"),
    MeshSource("ball", "pybullet", "soccerball.obj", up="z", description="a football"),
    MeshSource("torus", "pybullet", "torus/torus_textured.obj", up="y", description="a ring torus"),
    MeshSource("shelf", "pybullet", "kiva_shelf/meshes/pod_lowres.stl", up="y",
               description="a Kiva storage pod (a tall shelf with compartments)"),
    MeshSource("box", "trimesh", "box", (("extents", (1.0, 0.7, 0.45)),), description="a rectangular box"),
    MeshSource("cone", "trimesh", "cone", (("radius", 0.5), ("height", 1.2), ("sections", 48)),
               description="a closed cone, apex up"),
    MeshSource("cylinder", "trimesh", "cylinder", (("radius", 0.3), ("height", 1.4), ("sections", 48)),
               description="a closed cylinder"),
)
#: Class name -> :class:`MeshSource`, in label order.
MESH_SOURCES: dict[str, MeshSource] = {s.name: s for s in _SOURCES}
#: The class names (label = index), whether or not every mesh loads here (see :func:`available_classes`).
MESH_CLASSES: tuple[str, ...] = tuple(MESH_SOURCES)


# --------------------------------------------------------------------------- sampling


class Surface:
    """A triangle mesh prepared for area-weighted uniform sampling of its surface.

    Args:
        vertices: (V, 3) coordinates (any float dtype; computed in float64).
        faces: (F, 3) vertex indices of triangles (0-based).
        name: what the mesh is, for error messages.

    Attributes:
        areas: float64 (F,) triangle areas (zero-area triangles are never sampled).
        area: their sum.

    Raises:
        DataError: wrong shapes, indices out of range, non-finite coordinates or zero total area.
    """

    def __init__(self, vertices: np.ndarray, faces: np.ndarray, name: str = "mesh") -> None:
        v = np.asarray(vertices, dtype=np.float64)
        f = np.asarray(faces)
        if v.ndim != 2 or v.shape[1] != 3 or len(v) < 3:
            raise DataError(f"{name}: vertices must have shape (V, 3) with V >= 3, got {v.shape}")
        if f.ndim != 2 or f.shape[1] != 3 or len(f) < 1:
            raise DataError(f"{name}: faces must be triangles of shape (F, 3) with F >= 1, got {f.shape} "
                            "(split polygons into triangles first)")
        if not np.issubdtype(f.dtype, np.integer):
            raise DataError(f"{name}: faces must hold integer vertex indices, got dtype {f.dtype}")
        f = f.astype(np.int64)
        if f.min() < 0 or f.max() >= len(v):
            raise DataError(f"{name}: a face refers to vertex {int(f.min() if f.min() < 0 else f.max())}, "
                            f"but the vertices are numbered 0..{len(v) - 1}")
        if not np.isfinite(v).all():
            raise DataError(f"{name}: vertices contain NaN or infinite coordinates")
        self.name = name
        self.origin = v[f[:, 0]]
        self.edge1 = v[f[:, 1]] - self.origin
        self.edge2 = v[f[:, 2]] - self.origin
        self.areas = 0.5 * np.linalg.norm(np.cross(self.edge1, self.edge2), axis=1)
        self.area = float(self.areas.sum())
        if not self.area > 0 or not math.isfinite(self.area):
            raise DataError(f"{name}: the mesh has no surface area (all {len(f)} triangles are degenerate), "
                            "so no points can be sampled from it")
        self._cum = np.cumsum(self.areas)

    def sample(self, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``count`` points uniform on the surface: each lands on triangle k with probability
        ``areas[k] / area``, uniformly within it (barycentric ``(1 − √r₁, √r₁(1 − r₂), √r₁ r₂)``).

        Returns ``(points float64 (count, 3), face index int64 (count,))``; the result depends only
        on the mesh, ``count`` and the state of ``rng`` (3·count uniform draws)."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise DataError(f"count must be a positive integer (points to sample), got {count!r}")
        u = rng.random(int(count)) * self._cum[-1]
        face = np.minimum(np.searchsorted(self._cum, u, side="right"), len(self._cum) - 1)
        r1 = np.sqrt(rng.random(int(count)))[:, None]
        r2 = rng.random(int(count))[:, None]
        pts = self.origin[face] + r1 * (1.0 - r2) * self.edge1[face] + (r1 * r2) * self.edge2[face]
        return pts, face.astype(np.int64)


def sample_surface(vertices: np.ndarray, faces: np.ndarray, count: int, rng: np.random.Generator | int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Area-weighted uniform sample of ``count`` points on a triangle mesh (see :class:`Surface`);
    ``rng`` is a numpy Generator or an integer seed. Returns ``(points (count, 3) float64,
    face index (count,) int64)``."""
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return Surface(vertices, faces).sample(count, gen)


def normalise_cloud(points: np.ndarray, name: str = "point cloud") -> np.ndarray:
    """NERO's normalisation: subtract the centroid (mean of the points), divide by the largest point
    norm. Returns float32 (N, 3) (computed in float64).

    Raises:
        DataError: not (N, 3), non-finite, or all points at one place (nothing to scale)."""
    p = np.asarray(points, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 3 or len(p) < 1:
        raise DataError(f"{name}: a point cloud must have shape (N, 3) with N >= 1, got {p.shape}")
    if not np.isfinite(p).all():
        raise DataError(f"{name}: the cloud contains NaN or infinite coordinates")
    p = p - p.mean(axis=0)
    r = float(np.sqrt((p * p).sum(axis=1)).max())
    if not r > 0:
        raise DataError(f"{name}: all {len(p)} points coincide, so the cloud cannot be scaled to unit norm")
    return (p / r).astype(np.float32)


def deform(points: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The random non-rigid augmentation of the module docstring (steps 2–6, no rotation): per-axis
    scale in :data:`AXIS_SCALE`, taper ``x, y *= 1 + t·z`` (|t| <= :data:`TAPER`), bend
    ``x += b_x·z², y += b_y·z²`` (|b| <= :data:`BEND`), overall scale in :data:`OVERALL_SCALE`, then
    Gaussian jitter of σ = :data:`JITTER_SIGMA`. ``points`` is float (N, 3) in canonical units (z up);
    returns float64 (N, 3), not normalised. Draws 7 parameters first, then 3·N normals, so the
    shape does not depend on N."""
    p = np.asarray(points, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 3:
        raise DataError(f"deform needs points of shape (N, 3), got {p.shape}")
    axis = rng.uniform(*AXIS_SCALE, size=3)
    taper = rng.uniform(-TAPER, TAPER)
    bend = rng.uniform(-BEND, BEND, size=2)
    scale = rng.uniform(*OVERALL_SCALE)
    q = p * axis
    z = q[:, 2]
    q[:, :2] *= (1.0 + taper * z)[:, None]
    q[:, :2] += bend[None, :] * (z * z)[:, None]
    q *= scale
    return q + rng.normal(0.0, JITTER_SIGMA, size=q.shape)


# --------------------------------------------------------------------------- meshes


def _import_mesh_libraries() -> tuple[Any, str]:
    try:
        import trimesh
    except ImportError as exc:
        raise DataError(f"the built-in mesh shapes need trimesh, which is not installed: {_INSTALL}") from exc
    try:
        import pybullet_data
    except ImportError as exc:
        raise DataError("the built-in mesh shapes read the meshes shipped with pybullet (pybullet_data), "
                        f"which is not installed: {_INSTALL}") from exc
    return trimesh, pybullet_data.getDataPath()


def _load_source(src: MeshSource) -> tuple[np.ndarray, np.ndarray]:
    trimesh, root = _import_mesh_libraries()
    if src.kind == "trimesh":
        mesh = getattr(trimesh.creation, src.source)(**dict(src.params))
    else:
        path = os.path.join(root, src.source)
        if not os.path.isfile(path):
            raise DataError(f"{path} is missing from this pybullet installation")
        try:
            mesh = trimesh.load(path, force="mesh")
        except Exception as exc:  # trimesh raises many kinds for unreadable files
            raise DataError(f"trimesh cannot load {path}: {type(exc).__name__}: {exc}") from exc
    v = np.asarray(getattr(mesh, "vertices", np.empty((0, 3))), dtype=np.float64).reshape(-1, 3)
    f = np.asarray(getattr(mesh, "faces", np.empty((0, 3))), dtype=np.int64).reshape(-1, 3)
    if not np.isfinite(v).all():
        raise DataError(f"{src}: vertices contain NaN or infinite coordinates")
    if len(f) < 4:
        raise DataError(f"{src}: only {len(f)} triangles (need at least 4 for a solid shape)")
    if src.up == "y":
        v = np.stack([v[:, 0], -v[:, 2], v[:, 1]], axis=1)
    used = v[np.unique(f)]
    lo, hi = used.min(axis=0), used.max(axis=0)
    ext = hi - lo
    if not ext.min() >= 0.01 * ext.max() or not ext.max() > 0:
        raise DataError(f"{src}: flat (extents {np.round(ext, 4).tolist()}), not a 3-D shape")
    v = v - (lo + hi) / 2
    v /= np.sqrt((v[np.unique(f)] ** 2).sum(axis=1)).max()
    Surface(v, f, str(src))  # checks the area
    v.setflags(write=False)
    f.setflags(write=False)
    return v, f


@functools.lru_cache(maxsize=None)
def _load_all() -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, str]]:
    _import_mesh_libraries()  # a missing library is an error, not a skipped class
    meshes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    skipped: dict[str, str] = {}
    for name, src in MESH_SOURCES.items():
        try:
            meshes[name] = _load_source(src)
        except DataError as exc:
            skipped[name] = str(exc)
            warnings.warn(f"mesh class {name!r} is skipped: {exc}", RuntimeWarning, stacklevel=3)
    return meshes, skipped


@functools.lru_cache(maxsize=None)
def _surface(name: str) -> Surface:
    v, f = _load_all()[0][name]
    return Surface(v, f, str(MESH_SOURCES[name]))


def canonical_mesh(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The canonical mesh of class ``name``: ``(vertices float64 (V, 3), faces int64 (F, 3))``,
    read-only, z up, bounding-box centre at the origin, farthest vertex at distance 1. Loaded once
    per process.

    Raises:
        DataError: unknown class, missing libraries (with the install command), or a mesh that was
            skipped here (with the reason)."""
    if name not in MESH_SOURCES:
        raise DataError(f"unknown mesh class {name!r}; the classes are {', '.join(MESH_CLASSES)}")
    meshes, skipped = _load_all()
    if name in skipped:
        raise DataError(f"mesh class {name!r} is not available here: {skipped[name]}")
    return meshes[name]


def available_classes() -> tuple[str, ...]:
    """The classes whose meshes loaded in this process (all of :data:`MESH_CLASSES` normally)."""
    meshes, _ = _load_all()
    return tuple(n for n in MESH_CLASSES if n in meshes)


def skipped_meshes() -> dict[str, str]:
    """Class -> why its mesh was skipped here (empty when every mesh loaded)."""
    return dict(_load_all()[1])


# --------------------------------------------------------------------------- the dataset


def _positive_int(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise DataError(f"{what} must be a positive integer, got {value!r}")
    return int(value)



def check_cloud_size(n_per_class: int, classes: int, points: int) -> None:
    """Refuse point-cloud sets over the data limits (:mod:`orbitscope.data.limits`) before allocating:
    ``n_per_class × classes`` items at most ``$ORBITSCOPE_MAX_DATA_ITEMS``, and the estimated bytes
    ``n_per_class × classes × points × 12`` (the float32 clouds) ``+ points ×`` :data:`CLOUD_BYTES_PER_POINT`
    (making one cloud) at most ``$ORBITSCOPE_MAX_DATA_BYTES``. ``n_per_class=0`` checks making one cloud
    only (a dataset that makes its clouds when asked, e.g. ``modelnet:``).

    Raises:
        DataError: over a limit; the message names the parameters, the estimate, the limit and how to raise it.
    """
    check_data_items(f"n={n_per_class} × {classes} classes", n_per_class * classes, "use a smaller n")
    what = "the clouds (n × classes × points × 3 float32) and the sampling of one" if n_per_class else \
        "sampling one cloud (float64 points and their deformation)"
    check_data_bytes(f"n={n_per_class}, points={points}" if n_per_class else f"points={points}",
                     n_per_class * classes * points * 12 + points * CLOUD_BYTES_PER_POINT, what,
                     "use fewer points" + (" or a smaller n" if n_per_class else ""))


def make_cloud(name: str, split: str, index: int, points: int = 1024, seed: int = 0) -> np.ndarray:
    """Cloud ``index`` (0-based, within its class) of class ``name`` in ``split``: float32
    (points, 3), made as the module docstring says (deterministic in its arguments)."""
    if split not in _SPLIT_CODE:
        raise DataError(f"split must be 'train' or 'test', got {split!r}")
    canonical_mesh(name)  # explains an unknown or skipped class
    surface = _surface(name)
    key = (_SPLIT_CODE[split], zlib.crc32(name.encode()), int(index))
    shape_rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(*key, 0)))
    point_rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(*key, 1)))
    pts, _ = surface.sample(points, point_rng)
    return normalise_cloud(deform(pts, shape_rng), f"{name} cloud {index}")


class MeshClouds(Dataset):
    """Point clouds sampled from the built-in real meshes (module docstring): items
    ``(points float32 tensor (N, 3), label int64 tensor ())``.

    Args:
        split: ``"train"`` or ``"test"``; the two use different seed streams, so no cloud is shared.
        n_per_class: clouds per class (default :data:`DEFAULT_N_PER_CLASS`: 64 train, 16 test).
        points: N, points per cloud (1,024 as in NERO).
        seed: integer >= 0; the same arguments always give the same clouds.
        classes: a selection of :data:`MESH_CLASSES` (default: every class that loads here); labels
            index this selection.

    Items are interleaved: item j is sample ``j // K`` of class ``classes[j % K]`` (K classes), so
    the first m·K items hold m clouds of every class (``@N`` in a data spec stays balanced).

    Attributes:
        classes: class names (label = index). labels: int64 (len,). sample_index: int64 (len,),
            each item's index within its class. clouds: float32 (len, N, 3), read-only.
        data_id: the canonical data spec (``parse_data_spec(ds.data_id)`` rebuilds the set), e.g.
            ``"meshes:test,n=16,points=1024,seed=0,v=1"``.

    Raises:
        DataError: bad arguments, unknown or unavailable classes, missing trimesh/pybullet.
    """

    def __init__(self, split: str = "test", n_per_class: int | None = None, points: int = 1024, seed: int = 0,
                 classes: Sequence[str] | None = None) -> None:
        if split not in _SPLIT_CODE:
            raise DataError(f"split must be 'train' or 'test', got {split!r}")
        n = DEFAULT_N_PER_CLASS[split] if n_per_class is None else _positive_int("n_per_class", n_per_class)
        self.points = _positive_int("points", points)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise DataError(f"seed must be an integer >= 0, got {seed!r}")
        if classes is None:
            chosen = available_classes()
        else:
            chosen = (classes,) if isinstance(classes, str) else tuple(classes)
            unknown = [c for c in chosen if c not in MESH_SOURCES]
            if not chosen or unknown or len(set(chosen)) != len(chosen):
                raise DataError(f"classes must be distinct names from {', '.join(MESH_CLASSES)}; got {list(chosen)}")
            for c in chosen:
                canonical_mesh(c)  # explains a skipped class
        if not chosen:
            raise DataError(f"no mesh loaded here ({skipped_meshes()}); reinstall with {_INSTALL}")
        k = len(chosen)
        check_cloud_size(n, k, self.points)
        self.split, self.n_per_class, self.seed = split, n, int(seed)
        self.classes: tuple[str, ...] = chosen
        order = np.arange(n * k, dtype=np.int64)
        self.labels = order % k
        self.sample_index = order // k
        clouds = np.empty((n * k, self.points, 3), dtype=np.float32)
        for j in range(n * k):
            clouds[j] = make_cloud(chosen[self.labels[j]], split, int(self.sample_index[j]), self.points, self.seed)
        clouds.setflags(write=False)
        self.clouds = clouds
        self.data_id = f"meshes:{split},n={n},points={self.points},seed={self.seed},v={GENERATOR_VERSION}"
        if chosen != MESH_CLASSES:
            self.data_id += f",classes={'+'.join(chosen)}"

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} clouds")
        return torch.from_numpy(self.clouds[index].copy()), torch.tensor(int(self.labels[index]), dtype=torch.int64)

    def subset(self, indices: slice | Sequence[int] | np.ndarray, data_id: str | None = None) -> MeshClouds:
        """The items at ``indices`` (classes kept); ``data_id`` defaults to ours + ``[a:b]`` or a hash."""
        picked = picked_indices(len(self), indices, self.data_id)
        new = object.__new__(MeshClouds)
        new.__dict__.update(self.__dict__)
        new.labels, new.sample_index = self.labels[picked], self.sample_index[picked]
        clouds = self.clouds[picked]
        clouds.setflags(write=False)
        new.clouds = clouds
        new.data_id = data_id if data_id is not None else self.data_id + subset_tag(picked)
        return new

    def stratified(self, per_class: int) -> MeshClouds:
        """The first ``per_class`` clouds of every class (the first ``per_class · K`` items)."""
        m = _positive_int("per_class", per_class)
        if m > self.n_per_class:
            raise DataError(f"per_class={m} but {self.data_id} has {self.n_per_class} clouds per class")
        return self.subset(slice(0, m * len(self.classes)))


def mesh_clouds(split: str = "test", n_per_class: int | None = None, points: int = 1024, seed: int = 0,
                classes: Sequence[str] | None = None) -> MeshClouds:
    """:class:`MeshClouds` (the same arguments)."""
    return MeshClouds(split, n_per_class, points, seed, classes)


_SPEC_KEYS = ("split", "n", "points", "seed", "classes", "v")


def _meshes_spec(rest: str) -> MeshClouds:
    kw: dict[str, Any] = {}
    parts = [p.strip() for p in rest.split(",")] if rest else []
    for pos, part in enumerate(parts):
        key, eq, val = (s.strip() for s in part.partition("="))
        key = key.lower()
        if not eq and pos == 0 and key in _SPLIT_CODE:
            key, val = "split", key
        elif not eq or key not in _SPEC_KEYS or not val:
            what = f"unknown key {key!r}" if eq and key not in _SPEC_KEYS else f"expected KEY=VALUE, got {part!r}"
            raise SpecError(f"{what}; the form is meshes[:train|test][,n=N,points=P,seed=K,classes=A+B] "
                            "(e.g. meshes:train,n=40,points=512,seed=0)")
        if key in kw:
            raise SpecError(f"key {key!r} given twice")
        if key == "split":
            if val.lower() not in _SPLIT_CODE:
                raise SpecError(f"split must be train or test, got {val!r}")
            kw[key] = val.lower()
        elif key in ("n", "points", "seed"):
            try:
                kw[key] = int(val)
            except ValueError:
                raise SpecError(f"{key} must be an integer, got {val!r}") from None
        elif key == "classes":
            kw[key] = tuple(c.strip().lower() for c in val.split("+"))
        elif val != str(GENERATOR_VERSION):
            raise SpecError(f"this orbitscope makes mesh clouds of generator version {GENERATOR_VERSION}, not "
                            f"v={val}: such clouds cannot be rebuilt here")
        else:
            kw[key] = val
    try:
        return MeshClouds(kw.get("split", "test"), kw.get("n"), kw.get("points", 1024), kw.get("seed", 0),
                          kw.get("classes"))
    except DataError as exc:
        if "pip install" in str(exc):
            raise
        raise SpecError(str(exc)) from exc


register_data_spec("meshes", _meshes_spec, usage="meshes[:train|test][,n=N,points=P,seed=K,classes=A+B]")

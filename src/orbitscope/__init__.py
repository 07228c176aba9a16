"""orbitscope: test ML models for invariance, equivariance and robustness over group orbits.

Quick tour::

    import orbitscope as osc
    orbit = osc.Rotation(range(0, 361, 5))                 # dims: angle (degrees, CCW as displayed)
    run = osc.evaluate(model, osc.mnist_subset("test"), orbit, store="orbitscope-runs")
    run.result.correct.mean("sample")                      # accuracy per angle
    osc.aggregate(run.result, "correct")                   # with Wilson intervals
"""

from importlib.metadata import PackageNotFoundError, version

from .actions import act, list_kinds, rotate_images, warp_images
from .engine import DataError, ModelError, Run, evaluate
from .groups import (
    Brightness,
    Contrast,
    Orbit,
    Product,
    Rotation,
    Rotation3D,
    Rotation90,
    Scale,
    Transforms,
    Translation,
    list_orbits,
    orbit_from_spec,
    parse_orbit,
)
from .result import OrbitResult, aggregate, wilson_interval
from .store import Store, StoreError
from .tasks import Classification, Task

try:
    __version__ = version("orbitscope")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0.0.0"


def __getattr__(name: str):  # lazy access to heavier submodules' public names
    import importlib

    for module in ("data", "models", "loading", "training"):
        mod = importlib.import_module(f".{module}", __name__)
        if name in getattr(mod, "__all__", ()) or (not name.startswith("_") and hasattr(mod, name) and name in dir(mod)):
            return getattr(mod, name)
    raise AttributeError(f"module 'orbitscope' has no attribute {name!r}")

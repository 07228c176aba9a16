"""orbitscope: test ML models for invariance, equivariance and robustness over group orbits.

Quick tour::

    import orbitscope as osc
    orbit = osc.Rotation(range(0, 361, 5))                 # dims: angle (degrees, CCW as displayed)
    run = osc.evaluate(model, osc.mnist_subset("test"), orbit, store="orbitscope-runs")
    run.result.correct.mean("sample")                      # accuracy per angle
    osc.aggregate(run.result, "correct")                   # with Wilson intervals

The package follows the flow of data: ``group`` (elements and orbits) -> ``kinds`` (how an
element acts on each kind of data) -> ``data`` -> ``tasks`` (how outputs are scored) ->
``engine`` (chunk jobs, executors, one writer) -> ``results`` (OrbitResult, store) ->
``analysis`` / ``viz`` / ``app`` (NERO plots, consensus, reports, the interface); ``ml4ml`` and
``robust`` build on the same pieces. The names below are the pipeline; the rest lives in those
packages.
"""

from importlib.metadata import PackageNotFoundError, version

# errors
from .errors import DataError, ModelError, NotFoundError, OrbitscopeError, SpecError, StoreError
# groups and orbits
from .group import (
    D4,
    NERO_MOSAIC,
    Brightness,
    Contrast,
    Flip,
    NeroSO3,
    Octahedral,
    Orbit,
    Product,
    Rotation,
    Rotation3D,
    Rotation90,
    Scale,
    SO3Grid,
    TimeReversal,
    Transforms,
    Translation,
    d4_time_reversal,
    list_orbits,
    orbit_from_spec,
    parse_orbit,
    register_orbit,
)
# data kinds and their actions
from .kinds import Boxes, Kind, act, get_kind, list_kinds, register_kind, rotate_images, warp_images, warp_window
# data
from .data import ArrayDataset, ImageFolder, fashion_mnist, load_idx_dataset, mnist_subset, parse_data_spec, read_idx
# tasks
from .tasks import Classification, Detection, Flow, Task, Variable, list_tasks, register_task, task_from_spec
# engine
from .engine import ActivationProbe, Run, evaluate
from .engine.executors import EXECUTORS, Executor, LocalExecutor, ProcessExecutor
from .engine.ray_executor import RayExecutor
from .engine.shipping import ship_as
from .engine.sweep import SweepResult, SweepRun, sweep
from .engine.sweep_file import SweepPlan, load_sweep
# results
from .results.result import OrbitResult, aggregate, dataset_metrics, wilson_interval
from .results.store import Store
# analysis
from .analysis.consensus import consensus_scores, invariance_measures, with_consensus
from .analysis.exactness import exactness
# whole-orbit statistics
from .stats import check_result, compare_models, invariance_test, plan_samples, simultaneous_band
# the Lie derivative (local equivariance error)
from .lie import lie_derivative
# models
from .models.equivariant import P4CNN, symmetrize
from .models.c8 import C8CNN
from .models.loading import load_model, load_user_model, save_model
from .models.reference import ReferenceCNN, SmallCNN, fold_batchnorm, model_hash, optimize_for_inference
from .training.recipes import TrainRecipe, cached_reference_model, train_classifier
# ML4ML
from .ml4ml.matrices import VarianceMatrices, variance_matrices, variance_matrix
from .ml4ml.matrix_plots import matrix_figure, matrix_panel
from .ml4ml.modeldb import ModelDatabase

__all__ = [
    # errors
    "OrbitscopeError", "DataError", "ModelError", "SpecError", "StoreError", "NotFoundError",
    # groups
    "Orbit", "Transforms", "Rotation", "Rotation90", "Translation", "Scale", "Brightness", "Contrast", "Flip",
    "D4", "TimeReversal", "d4_time_reversal", "NERO_MOSAIC", "Rotation3D", "NeroSO3", "SO3Grid", "Octahedral",
    "Product", "parse_orbit", "orbit_from_spec", "list_orbits", "register_orbit",
    # kinds
    "Kind", "Boxes", "act", "get_kind", "list_kinds", "register_kind", "warp_images", "warp_window", "rotate_images",
    # data
    "ArrayDataset", "ImageFolder", "fashion_mnist", "load_idx_dataset", "mnist_subset", "parse_data_spec", "read_idx",
    # tasks
    "Task", "Classification", "Detection", "Flow", "Variable", "register_task", "list_tasks", "task_from_spec",
    # engine
    "evaluate", "Run", "ActivationProbe", "Executor", "LocalExecutor", "ProcessExecutor", "EXECUTORS",
    "RayExecutor", "ship_as", "sweep", "SweepRun", "SweepResult", "SweepPlan", "load_sweep",
    # results
    "OrbitResult", "aggregate", "dataset_metrics", "wilson_interval", "Store",
    # analysis
    "consensus_scores", "invariance_measures", "with_consensus", "exactness",
    # whole-orbit statistics
    "simultaneous_band", "invariance_test", "compare_models", "plan_samples", "check_result",
    # the Lie derivative
    "lie_derivative",
    # models
    "P4CNN", "C8CNN", "symmetrize", "ReferenceCNN", "SmallCNN", "fold_batchnorm", "model_hash", "optimize_for_inference",
    "load_model", "load_user_model", "save_model", "TrainRecipe", "cached_reference_model", "train_classifier",
    # ML4ML
    "ModelDatabase", "VarianceMatrices", "variance_matrices", "variance_matrix", "matrix_figure", "matrix_panel",
]

try:
    __version__ = version("orbitscope")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0.0.0"

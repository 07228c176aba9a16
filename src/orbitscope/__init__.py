"""orbitscope: test ML models for invariance, equivariance and robustness over group orbits.

Quick tour::

    import orbitscope as osc
    orbit = osc.Rotation(range(0, 361, 5))                 # dims: angle (degrees, CCW as displayed)
    run = osc.evaluate(model, osc.mnist_subset("test"), orbit, store="orbitscope-runs")
    run.result.correct.mean("sample")                      # accuracy per angle
    osc.aggregate(run.result, "correct")                   # with Wilson intervals
"""

from importlib.metadata import PackageNotFoundError, version

from .kinds import act, list_kinds, rotate_images, warp_images
from .analysis.consensus import consensus_scores, invariance_measures, with_consensus
from .data.datasets import ArrayDataset, ImageFolder, fashion_mnist, load_idx_dataset, mnist_subset, parse_data_spec, read_idx
from .models.equivariant import P4CNN, symmetrize
from .engine.evaluate import DataError, ModelError, Run, evaluate
from .group.orbits import (
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
from .engine.activations import ActivationProbe
from .models.loading import load_model, load_user_model, save_model
from .ml4ml.matrices import VarianceMatrices, variance_matrices, variance_matrix
from .ml4ml.matrix_plots import matrix_figure, matrix_panel
from .ml4ml.modeldb import ModelDatabase
from .models.reference import ReferenceCNN, SmallCNN, fold_batchnorm, model_hash, optimize_for_inference
from .results.result import OrbitResult, aggregate, wilson_interval
from .results.store import Store, StoreError
from .tasks import Classification, Task
from .training.recipes import TrainRecipe, cached_reference_model, train_classifier

__all__ = [
    "ActivationProbe",
    "ModelDatabase",
    "SmallCNN",
    "VarianceMatrices",
    "matrix_figure",
    "matrix_panel",
    "variance_matrices",
    "variance_matrix",
    "P4CNN",
    "consensus_scores",
    "invariance_measures",
    "symmetrize",
    "with_consensus",
    "ArrayDataset",
    "Brightness",
    "Classification",
    "Contrast",
    "DataError",
    "ImageFolder",
    "ModelError",
    "Orbit",
    "OrbitResult",
    "Product",
    "ReferenceCNN",
    "Rotation",
    "Rotation3D",
    "Rotation90",
    "Run",
    "Scale",
    "Store",
    "StoreError",
    "Task",
    "TrainRecipe",
    "Transforms",
    "Translation",
    "act",
    "aggregate",
    "cached_reference_model",
    "evaluate",
    "fashion_mnist",
    "fold_batchnorm",
    "list_kinds",
    "list_orbits",
    "load_idx_dataset",
    "load_model",
    "load_user_model",
    "mnist_subset",
    "model_hash",
    "optimize_for_inference",
    "orbit_from_spec",
    "parse_data_spec",
    "parse_orbit",
    "read_idx",
    "rotate_images",
    "save_model",
    "train_classifier",
    "warp_images",
    "wilson_interval",
]

try:
    __version__ = version("orbitscope")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "0.0.0"

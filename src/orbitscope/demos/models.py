"""Every trained model the demo evaluates, as one list: trained together by ``make models``
(``orbitscope demo-models``) and shipped with orbitscope (:mod:`orbitscope.demos.shipped`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..training.detection import detector_cache_path
from ..training.flow import flow_cache_path
from ..training.pointcloud import point_cache_path
from ..training.recipes import TrainRecipe, cache_path
from .detection import DETECTORS, train_detectors
from .ml4ml import JUDGED
from .mnist import DEMO_CASES, train_classifiers
from .piv import FLOW_RECIPES, train_flow_models
from .pointcloud import POINT_RECIPES, train_point_models

__all__ = ["classifier_recipes", "demo_model_files", "train_demo_models"]


def classifier_recipes() -> list[TrainRecipe]:
    """The image classifiers' recipes: every MNIST / Fashion-MNIST case's and ML4ML's judged models."""
    recipes = [r for case in DEMO_CASES for r in case.models.values() if isinstance(r, TrainRecipe)]
    return list(dict.fromkeys(recipes + list(JUDGED.values())))


def demo_model_files(cache: Path) -> list[Path]:
    """The cache files (``<cache>/<name>-<key>.safetensors``) of every trained model of the demo."""
    return ([cache_path(r, cache) for r in classifier_recipes()]
            + [detector_cache_path(r, cache) for r in DETECTORS.values()]
            + [flow_cache_path(r, cache) for r in FLOW_RECIPES.values()]
            + [point_cache_path(r, cache) for r in POINT_RECIPES.values()])


def train_demo_models(cache: Path, say: Callable[[str], None], *, shipped: bool = False) -> float:
    """Train every demo model missing from ``cache`` (from scratch unless ``shipped``, which copies
    the shipped ones first); returns the seconds spent training."""
    return (train_classifiers(classifier_recipes(), cache, say, shipped=shipped)
            + train_detectors(cache, say, shipped=shipped)
            + train_flow_models(cache, say, shipped=shipped)
            + train_point_models(cache, say, shipped=shipped))

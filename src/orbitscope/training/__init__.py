"""Training recipes for the models under test (reproducible, cached by recipe)."""

from .recipes import (
    AUGMENTATIONS,
    DATASETS,
    EXTRA_RECIPES,
    RECIPES,
    TrainRecipe,
    all_recipes,
    cache_path,
    cached_reference_model,
    evaluate_accuracy,
    fashion_test_subset,
    fit_epochs,
    load_or_train,
    sample_angles,
    train_classifier,
    train_reference_model,
    training_data,
    with_defects,
)

__all__ = ["AUGMENTATIONS", "TrainRecipe", "RECIPES", "EXTRA_RECIPES", "DATASETS", "all_recipes", "training_data",
           "fashion_test_subset", "sample_angles", "with_defects", "train_classifier", "evaluate_accuracy",
           "train_reference_model", "cached_reference_model", "cache_path", "load_or_train", "fit_epochs"]

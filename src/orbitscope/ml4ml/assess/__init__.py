"""ML4ML (Liao, Zhang & Chen, arXiv 2109.12926): variance-matrix features and assessors.

* :mod:`.features`: the 16 features of a variance matrix (and 80 per model);
* :mod:`.assessors`: scikit-learn assessors, a CNN on the matrix images, formula baselines,
  importances, and saved assessor bundles;
* :mod:`.validation`: cross-validation holding whole model families out;
* :mod:`.pipeline`: from the model database to assessors and verdicts on new models.
"""

from .assessors import (
    ASSESSORS,
    BASELINES,
    INPUT_KINDS,
    AccuracyDropBaseline,
    AllLevelsCorrectBaseline,
    WorstLevelAccuracyBaseline,
    AssessorBundle,
    MatrixCNNAssessor,
    accuracy_drop,
    all_levels_correct_share,
    best_threshold,
    feature_importances,
    input_kind,
    stack_matrices,
    worst_level_accuracy,
)
from .features import FEATURE_NAMES, matrix_features, model_features, sensitivity
from .validation import CVReport, cross_validate_by_family, family_folds

__all__ = [
    "FEATURE_NAMES", "matrix_features", "model_features", "sensitivity", "ASSESSORS", "BASELINES", "INPUT_KINDS",
    "input_kind", "MatrixCNNAssessor", "stack_matrices", "AccuracyDropBaseline", "AllLevelsCorrectBaseline",
    "WorstLevelAccuracyBaseline", "worst_level_accuracy", "accuracy_drop", "all_levels_correct_share", "best_threshold", "feature_importances", "AssessorBundle",
    "cross_validate_by_family", "family_folds", "CVReport",
]

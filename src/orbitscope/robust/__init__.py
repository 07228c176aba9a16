"""Probabilistic robustness: perturbation samplers, sequential tests, certification.

Implements the probabilistic robustness metric of Mu & Lim (arXiv 2404.16457) with tests that
stay valid under sequential sampling:

* :mod:`.samplers`: L∞ (optionally 8-bit quantised), L2 and Gaussian noise, random group
  elements (rotation, shift, scale, brightness) and their products;
* :mod:`.sequential`: the exact binomial test, the published sequential rule (a baseline, not
  error-controlled), Wald's SPRT (the default) and a beta-binomial confidence sequence;
* :mod:`.bounds`: certified robust accuracy and the global ("tower") bound on E_x[p(x)];
* :mod:`.certify`: the batched certification loop over a model;
* :mod:`.attack`: a ``torchattacks.Attack`` adapter (needs ``pip install --no-deps torchattacks``);
* :mod:`.adversarial`, :mod:`.compare`: a PGD-trained reference model and the comparison table;
* :mod:`.verify`, :mod:`.smoothing`: deterministic IBP/CROWN verification and randomized smoothing.
"""

from typing import Any

from .adversarial import ADVERSARIAL_RECIPES, AdversarialRecipe, cached_adversarial_model, pgd_accuracy
from .bounds import CertifiedAccuracy, Estimate, certified_robust_accuracy, tower_bound_population, tower_bound_test_set
from .certify import CertificationResult, certify, perturbation_stream
from .compare import RobustnessComparison, compare_robustness, reference_models
from .samplers import (
    PERTURBATIONS,
    GaussianNoise,
    L2Uniform,
    LinfUniform,
    PerturbationSampler,
    ProductSampler,
    RandomBrightness,
    RandomRotation,
    RandomScale,
    RandomShift,
    list_perturbations,
    parse_perturbation,
    register_perturbation,
    sampler_from_spec,
)
from .smoothing import (ABSTAIN, SmoothedCertificate, SmoothedPrediction, linf_radius, noise_counts, smoothed_certify,
                        smoothed_predict)
from .verify import (VERIFY_METHODS, VerificationResult, VerifiedNetwork, crown_bounds, interval_bounds, margin_spec,
                     verify)
from .sequential import (
    DEFAULT_TEST,
    NOT_ROBUST,
    ROBUST,
    UNDECIDED,
    BinomialTest,
    ConfidenceSequenceTest,
    PublishedTest,
    RobustnessTest,
    SimulationResult,
    SPRTTest,
    TESTS,
    binom_test_two_sided,
    clopper_pearson,
    default_budget,
    fixed_sample_size,
    list_tests,
    make_test,
    register_test,
    simulate,
)

__all__ = [
    "ROBUST", "NOT_ROBUST", "UNDECIDED", "DEFAULT_TEST", "RobustnessTest", "BinomialTest", "PublishedTest",
    "SPRTTest", "ConfidenceSequenceTest", "make_test", "list_tests", "fixed_sample_size", "default_budget",
    "simulate", "SimulationResult", "binom_test_two_sided", "clopper_pearson", "Estimate", "CertifiedAccuracy",
    "certified_robust_accuracy", "tower_bound_test_set", "tower_bound_population", "PerturbationSampler",
    "LinfUniform", "L2Uniform", "GaussianNoise", "RandomRotation", "RandomShift", "RandomScale", "RandomBrightness",
    "ProductSampler", "parse_perturbation", "sampler_from_spec", "list_perturbations", "CertificationResult",
    "certify", "perturbation_stream", "RobustnessComparison", "compare_robustness", "reference_models",
    "AdversarialRecipe", "ADVERSARIAL_RECIPES", "cached_adversarial_model", "pgd_accuracy",
    "ProbabilisticRobustness", "torchattacks_available", "PERTURBATIONS", "register_perturbation", "TESTS",
    "register_test",
    "VERIFY_METHODS", "VerificationResult", "VerifiedNetwork", "crown_bounds", "interval_bounds", "margin_spec",
    "verify", "ABSTAIN", "SmoothedCertificate", "SmoothedPrediction", "linf_radius", "noise_counts",
    "smoothed_certify", "smoothed_predict",
]


def __getattr__(name: str) -> Any:
    """The TorchAttacks adapter is imported on first use (importing torchattacks takes seconds)."""
    if name in ("ProbabilisticRobustness", "torchattacks_available"):
        from . import attack

        return getattr(attack, name)
    raise AttributeError(f"module 'orbitscope.robust' has no attribute {name!r}")

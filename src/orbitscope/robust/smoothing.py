"""Randomized smoothing (Cohen, Rosenfeld & Kolter 2019, "Certified adversarial robustness via
randomized smoothing"): PREDICT and CERTIFY for the smoothed classifier.

The *smoothed* classifier of a base model f is g(x) = argmax_c P(f(x + δ) = c), δ ~ N(0, σ² I).
Its certificates are statements about g, not about f: if the top class has probability
p_A ≥ p̲_A > 1/2 under noise, g returns that class on the whole L2 ball of radius σ·Φ⁻¹(p̲_A)
(Cohen et al., Theorem 1 with p_B ≤ 1 − p_A). A user who deploys f itself has no certificate.

Procedures (Cohen et al., Section 3.2, "Pseudocode"):
    * **PREDICT** (:func:`smoothed_predict`): n noisy copies, counts of the top two classes
      n_A, n_B; return the top class if a two-sided binomial test of n_A out of n_A + n_B against
      1/2 gives p ≤ α (``scipy.stats.binomtest``), else abstain. The probability of returning a
      class other than g(x) is at most α.
    * **CERTIFY** (:func:`smoothed_certify`): n₀ noisy copies select the top class c_A; n *fresh*
      copies give n_A; the one-sided Clopper–Pearson lower bound p̲_A at confidence 1 − α (the
      α-quantile of Beta(n_A, n − n_A + 1)); abstain if p̲_A ≤ 1/2, else return c_A with the L2
      radius R = σ·Φ⁻¹(p̲_A). With probability ≥ 1 − α over the noise the returned class is g(x)
      and g is constant on the L2 ball of radius R.

Conventions:
    * Inputs x are (B, C, H, W) (or (B, …)) in [0, 1] *before* normalisation, and the noise is
      added in that space: σ is in pixel units of [0, 1] (σ = 0.25 means a standard deviation of
      64 grey levels). A normalisation given as ``normalize=(mean, std)`` is applied after the
      noise, as in :func:`orbitscope.robust.certify.certify`. The noisy inputs are **not clamped**
      to [0, 1] (as in Cohen et al.'s code); the base model sees values outside the box.
    * L2 radii are in the same units; the implied L∞ radius is R∞ = R / √d for d = C·H·W input
      values (the L∞ ball of radius R/√d lies inside the L2 ball of radius R), a weak certificate
      for large images.
    * Seeded: ``generator`` (an int seed or a ``torch.Generator``) draws all noise, batch by
      batch in input order; results are reproducible for the same seed and ``batch_size``.
    * :data:`ABSTAIN` (−1) marks an abstention in predictions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats
from torch import Tensor, nn

from ..errors import SpecError
from ..models.reference import eval_mode, model_device
from .bounds import Estimate
from .sequential import clopper_pearson

__all__ = [
    "ABSTAIN",
    "SmoothedPrediction",
    "SmoothedCertificate",
    "noise_counts",
    "smoothed_predict",
    "smoothed_certify",
    "linf_radius",
]

#: Prediction value of an abstention.
ABSTAIN = -1

Progress = Callable[[int, int], None]


def _generator(generator: torch.Generator | int | None) -> torch.Generator:
    if isinstance(generator, torch.Generator):
        return generator
    if generator is None:
        generator = 0
    if not isinstance(generator, (int, np.integer)) or isinstance(generator, bool):
        raise SpecError(f"generator must be a torch.Generator or an int seed, got {generator!r}")
    return torch.Generator().manual_seed(int(generator))


def _check(sigma: float, alpha: float, batch_size: int, **counts: int) -> None:
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise SpecError(f"sigma must be a finite number > 0 (noise std in [0, 1] pixel units), got {sigma!r}")
    if not 0 < alpha < 1:
        raise SpecError(f"alpha must be in (0, 1), got {alpha!r}")
    for name, value in {"batch_size": batch_size, **counts}.items():
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise SpecError(f"{name} must be a positive integer, got {value!r}")


def noise_counts(model: nn.Module, x: Tensor, sigma: float, n: int, *, num_classes: int | None = None,
                 batch_size: int = 1000, generator: torch.Generator | int | None = 0,
                 normalize: tuple[Sequence[float], Sequence[float]] | None = None,
                 progress: Progress | None = None) -> Tensor:
    """Class counts of the base model on n Gaussian-noised copies of each input (Cohen's
    SAMPLEUNDERNOISE).

    Args:
        model: the base classifier (logits (B, K)); run in eval mode, its mode restored after.
        x: inputs (B, …) in [0, 1] before normalisation.
        sigma: noise standard deviation, in the units of x.
        n: noisy copies per input.
        num_classes: K (default: read from the first model output).
        batch_size: noisy inputs per forward pass (copies of several inputs share a batch).
        generator: an int seed or a ``torch.Generator`` (on any device) that draws the noise.
        normalize: ``(mean, std)`` per channel applied after the noise, before the model.
        progress: called as ``progress(done, total)`` in noisy samples after each batch.

    Returns:
        int64 counts (B, K) on CPU; each row sums to n.
    """
    _check(sigma, 0.5, batch_size, n=n)
    if not isinstance(x, Tensor) or x.ndim < 2:
        raise SpecError(f"x must be a batch (B, …) of inputs, got {getattr(x, 'shape', type(x).__name__)}")
    gen = _generator(generator)
    device = model_device(model)
    x = x.detach().to(device)
    if not x.is_floating_point():
        raise SpecError(f"x must hold floats in [0, 1], got dtype {x.dtype}")
    mean = std = None
    if normalize is not None:
        shape = (1, -1) + (1,) * (x.ndim - 2)
        mean = torch.as_tensor(normalize[0], dtype=x.dtype, device=device).reshape(shape)
        std = torch.as_tensor(normalize[1], dtype=x.dtype, device=device).reshape(shape)
    total = x.shape[0] * n
    counts: Tensor | None = None if num_classes is None else torch.zeros(x.shape[0], num_classes, dtype=torch.int64)
    done = 0
    with eval_mode(model), torch.inference_mode():
        while done < total:
            m = min(batch_size, total - done)
            idx = torch.arange(done, done + m) // n
            noise = torch.randn((m, *x.shape[1:]), generator=gen, device=gen.device, dtype=x.dtype)
            noisy = x[idx.to(device)] + sigma * noise.to(device)
            if mean is not None:
                noisy = (noisy - mean) / std
            logits = model(noisy)
            if counts is None:
                counts = torch.zeros(x.shape[0], logits.shape[1], dtype=torch.int64)
            pred = logits.argmax(1).cpu()
            counts.index_put_((idx, pred), torch.ones(m, dtype=torch.int64), accumulate=True)
            done += m
            if progress is not None:
                progress(done, total)
    assert counts is not None
    return counts


def linf_radius(l2_radius: Tensor | np.ndarray | float, input_dim: int) -> Tensor | np.ndarray | float:
    """The L∞ radius implied by an L2 certificate: R / √d for d input values (‖δ‖₂ ≤ √d·‖δ‖∞).

    Args:
        l2_radius: certified L2 radius (or radii).
        input_dim: d, the number of input values (C·H·W).
    """
    if input_dim < 1:
        raise SpecError(f"input_dim must be >= 1, got {input_dim}")
    return l2_radius / math.sqrt(input_dim)


@dataclass
class SmoothedPrediction:
    """Outcome of :func:`smoothed_predict`.

    Attributes:
        prediction: (B,) int64 class of the smoothed classifier, :data:`ABSTAIN` when the top two
            counts are not significantly different at level ``alpha``.
        counts: (B, K) class counts over the n noisy copies.
        p_value: (B,) two-sided binomial p-value of n_A out of n_A + n_B against 1/2.
        sigma: noise std ([0, 1] pixel units).
        n: noisy copies per input.
        alpha: level of the test.
    """

    prediction: Tensor
    counts: Tensor
    p_value: Tensor
    sigma: float
    n: int
    alpha: float


@dataclass
class SmoothedCertificate:
    """Outcome of :func:`smoothed_certify` (a certificate of the smoothed classifier g).

    Attributes:
        prediction: (B,) int64 class c_A, or :data:`ABSTAIN` when p̲_A ≤ 1/2.
        radius: (B,) certified L2 radius σ·Φ⁻¹(p̲_A) in [0, 1] pixel units (0 where abstained).
        radius_linf: (B,) the implied L∞ radius, radius / √d.
        p_lower: (B,) one-sided Clopper–Pearson lower bound of p_A at confidence 1 − α.
        selection_counts: (B, K) class counts of the n₀ selection copies.
        counts: (B, K) class counts of the n estimation copies.
        correct: (B,) bool, prediction == y (None when no labels were given).
        sigma: noise std.
        n0: selection copies.
        n: estimation copies.
        alpha: 1 − confidence of each certificate.
        input_dim: d, values per input.
    """

    prediction: Tensor
    radius: Tensor
    radius_linf: Tensor
    p_lower: Tensor
    selection_counts: Tensor
    counts: Tensor
    correct: Tensor | None
    sigma: float
    n0: int
    n: int
    alpha: float
    input_dim: int

    def certified(self, radius: float, norm: str = "l2") -> Tensor:
        """(B,) bool: correct and certified at ``radius`` (radius ≥ r; at r = 0, not abstained)."""
        if self.correct is None:
            raise SpecError("certified accuracy needs the labels: call smoothed_certify(..., y=labels)")
        if norm not in ("l2", "linf"):
            raise SpecError(f"norm must be 'l2' or 'linf', got {norm!r}")
        radii = self.radius if norm == "l2" else self.radius_linf
        return self.correct & (self.prediction != ABSTAIN) & (radii >= radius)

    def certified_accuracy(self, radius: float, norm: str = "l2") -> float:
        """Fraction of inputs that are correct with certified radius ≥ ``radius``."""
        c = self.certified(radius, norm)
        return float(c.float().mean()) if c.numel() else float("nan")

    def accuracy_estimate(self, radius: float, norm: str = "l2", confidence: float = 0.95) -> Estimate:
        """Certified accuracy at ``radius`` with an exact (Clopper–Pearson) interval over inputs."""
        c = self.certified(radius, norm)
        k, total = int(c.sum()), int(c.numel())
        lo, hi = clopper_pearson(k, total, confidence=confidence)
        return Estimate(k / total if total else float("nan"), float(lo), float(hi), k, total, confidence, "two-sided")


def smoothed_predict(model: nn.Module, x: Tensor, sigma: float, n: int = 1000, alpha: float = 0.001, *,
                     batch_size: int = 1000, generator: torch.Generator | int | None = 0,
                     num_classes: int | None = None,
                     normalize: tuple[Sequence[float], Sequence[float]] | None = None,
                     progress: Progress | None = None) -> SmoothedPrediction:
    """Cohen et al.'s PREDICT: the smoothed classifier's class, or :data:`ABSTAIN`.

    Args:
        model: the base classifier (logits (B, K)).
        x: inputs (B, …) in [0, 1] before normalisation.
        sigma: noise std in [0, 1] pixel units.
        n: noisy copies per input.
        alpha: level: a returned class differs from g(x) with probability ≤ alpha.
        batch_size: noisy inputs per forward pass.
        generator: an int seed or a ``torch.Generator``.
        num_classes: K (default: from the model's output).
        normalize: ``(mean, std)`` applied after the noise.
        progress: ``progress(done, total)`` in noisy samples.
    """
    _check(sigma, alpha, batch_size, n=n)
    counts = noise_counts(model, x, sigma, n, num_classes=num_classes, batch_size=batch_size,
                          generator=generator, normalize=normalize, progress=progress)
    top2 = torch.topk(counts, min(2, counts.shape[1]), dim=1)
    n_a = top2.values[:, 0]
    n_b = top2.values[:, 1] if counts.shape[1] > 1 else torch.zeros_like(n_a)
    pvals = torch.tensor([stats.binomtest(int(a), int(a + b), 0.5).pvalue for a, b in zip(n_a, n_b)],
                         dtype=torch.float64)
    pred = torch.where(pvals <= alpha, top2.indices[:, 0], torch.full_like(n_a, ABSTAIN))
    return SmoothedPrediction(pred, counts, pvals, float(sigma), int(n), float(alpha))


def smoothed_certify(model: nn.Module, x: Tensor, y: Tensor | None = None, sigma: float = 0.25, n0: int = 100,
                     n: int = 100_000, alpha: float = 0.001, *, batch_size: int = 1000,
                     generator: torch.Generator | int | None = 0, num_classes: int | None = None,
                     normalize: tuple[Sequence[float], Sequence[float]] | None = None,
                     progress: Progress | None = None) -> SmoothedCertificate:
    """Cohen et al.'s CERTIFY: the smoothed classifier's class and a certified L2 radius per input.

    Args:
        model: the base classifier (logits (B, K)).
        x: inputs (B, …) in [0, 1] before normalisation.
        y: true labels (B,) for ``correct`` and the certified accuracy (optional).
        sigma: noise std in [0, 1] pixel units.
        n0: noisy copies that select the top class.
        n: fresh noisy copies that estimate its probability.
        alpha: each certificate holds with probability ≥ 1 − alpha.
        batch_size: noisy inputs per forward pass.
        generator: an int seed or a ``torch.Generator``.
        num_classes: K (default: from the model's output).
        normalize: ``(mean, std)`` applied after the noise.
        progress: ``progress(done, total)`` over both phases, in noisy samples.
    """
    _check(sigma, alpha, batch_size, n0=n0, n=n)
    gen = _generator(generator)
    total = x.shape[0] * (n0 + n)

    def phase(offset: int) -> Progress | None:
        return None if progress is None else (lambda done, _t: progress(offset + done, total))

    kw = {"batch_size": batch_size, "generator": gen, "normalize": normalize}
    selection = noise_counts(model, x, sigma, n0, num_classes=num_classes, progress=phase(0), **kw)  # type: ignore[arg-type]
    counts = noise_counts(model, x, sigma, n, num_classes=selection.shape[1], progress=phase(x.shape[0] * n0), **kw)  # type: ignore[arg-type]
    top = selection.argmax(1)
    n_a = counts.gather(1, top.unsqueeze(1)).squeeze(1)
    p_lower = torch.as_tensor(clopper_pearson(n_a.numpy(), n, confidence=1 - alpha, alternative="greater")[0],
                              dtype=torch.float64).reshape(-1)
    certified = p_lower > 0.5
    radius = torch.where(certified, sigma * torch.as_tensor(stats.norm.ppf(p_lower.numpy()), dtype=torch.float64),
                         torch.zeros_like(p_lower))
    pred = torch.where(certified, top, torch.full_like(top, ABSTAIN))
    d = int(np.prod(x.shape[1:]))
    correct = None
    if y is not None:
        y = torch.as_tensor(y).long().reshape(-1).cpu()
        if y.shape[0] != x.shape[0]:
            raise SpecError(f"y must have one label per input ({x.shape[0]}), got {tuple(y.shape)}")
        correct = pred == y
    return SmoothedCertificate(pred, radius, linf_radius(radius, d), p_lower, selection, counts, correct,  # type: ignore[arg-type]
                               float(sigma), int(n0), int(n), float(alpha), d)

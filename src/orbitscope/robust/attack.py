"""A TorchAttacks adapter: probabilistic robustness certification as an ``Attack``.

:class:`ProbabilisticRobustness` subclasses ``torchattacks.Attack`` (tested with
torchattacks 3.5.1), so it is called like any attack, ``adv = atk(images, labels)``, and returns
an image tensor of the input's shape, dtype and device: for every input, the first failing
perturbation the certification found (a counterexample, f(x') ≠ y), or the input unchanged when
none was found. The per-input verdicts of the last call are kept in ``atk.last_result``
(a :class:`~orbitscope.robust.certify.CertificationResult`: outcome, samples, failures, bound).

It follows TorchAttacks' conventions: the model is evaluated through ``Attack.get_logits`` (so
``set_normalization_used(mean, std)`` works as for every attack: inputs and outputs of ``atk(…)``
are then normalised, perturbations are drawn in [0, 1] pixel space), ``set_device`` chooses where
sampling and the model run, ``set_model_training_mode`` chooses the model's mode (eval by
default), and it works inside ``torchattacks.MultiAttack`` (whose failure criterion, a prediction
different from the label, is the one used here unless ``label_free=True``).

torchattacks is optional: install it with ``pip install --no-deps torchattacks`` (its declared
dependencies would pull another torch). This module imports without it; using the class then
raises an ImportError saying so.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .certify import CertificationResult, certify_forward
from .samplers import PerturbationSampler, parse_perturbation

__all__ = ["ProbabilisticRobustness", "torchattacks_available"]

_INSTALL_HINT = (
    "the TorchAttacks adapter needs torchattacks: pip install --no-deps torchattacks "
    "(--no-deps keeps your torch; torchattacks' own requirements would replace it)"
)

try:  # optional dependency
    from torchattacks.attack import Attack as _AttackBase

    _HAVE_TORCHATTACKS = True
except ImportError:  # pragma: no cover - exercised only without torchattacks
    _HAVE_TORCHATTACKS = False

    class _AttackBase:  # type: ignore[no-redef]
        """Placeholder base class when torchattacks is not installed."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError(_INSTALL_HINT)


def torchattacks_available() -> bool:
    """Whether torchattacks can be imported (the adapter needs it)."""
    return _HAVE_TORCHATTACKS


class ProbabilisticRobustness(_AttackBase):
    """Certify each input by sampling perturbations; return counterexamples like an attack.

    Args:
        model: the classifier (images (B, C, H, W) -> class scores (B, classes)).
        perturbation: a sampler or spec (default ``"linf:8/255:8bit"``: Mu & Lim's uniform L∞
            box with 8-bit quantisation).
        test: as in :func:`orbitscope.robust.certify`.
        kappa: as in :func:`orbitscope.robust.certify`.
        alpha: as in :func:`orbitscope.robust.certify`.
        budget: as in :func:`orbitscope.robust.certify`.
        label_free: as in :func:`orbitscope.robust.certify`.
        batch_size: as in :func:`orbitscope.robust.certify`.
        seed: as in :func:`orbitscope.robust.certify`.

    Every call draws fresh perturbation streams: inputs are numbered across calls
    (``inputs_seen``), and the streams of input k depend only on ``seed`` and k.

    Attributes:
        last_result: the :class:`CertificationResult` of the last call (``None`` before).
    """

    def __init__(
        self,
        model: nn.Module,
        perturbation: PerturbationSampler | str = "linf:8/255:8bit",
        *,
        test: Any = None,
        kappa: float = 0.01,
        alpha: float = 0.01,
        budget: int | None = None,
        label_free: bool = False,
        batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        if not _HAVE_TORCHATTACKS:
            raise ImportError(_INSTALL_HINT)
        super().__init__("ProbabilisticRobustness", model)
        self.perturbation = parse_perturbation(perturbation)
        self.test = test
        self.kappa = float(kappa)
        self.alpha = float(alpha)
        self.budget = budget
        self.label_free = bool(label_free)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.inputs_seen = 0
        self._last_result: CertificationResult | None = None  # private: kept out of Attack.__repr__
        self.supported_mode = ["default"]

    @property
    def last_result(self) -> CertificationResult | None:
        """Verdicts and counts of the last call (``outcome``, ``samples``, ``failures``, ``bound``, …)."""
        return self._last_result

    def forward(self, images: Tensor, labels: Tensor | None = None) -> Tensor:
        """Counterexamples (B, C, H, W) in [0, 1]: a failing sample per input, else the input."""
        if not isinstance(images, Tensor) or images.ndim != 4:
            got = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(f"images must be a tensor (B, C, H, W) with values in [0, 1], got {got}")
        device = torch.device(self.device) if self.device is not None else images.device
        x = images.clone().detach().to(device)
        if labels is None:
            if not self.label_free:
                raise ValueError("labels are needed (failures count against them); or use label_free=True")
            y = torch.full((len(x),), -1, dtype=torch.long)
        else:
            y = torch.as_tensor(labels).clone().detach().reshape(-1).long().cpu()
            if len(y) != len(x):
                raise ValueError(f"{len(x)} images but {len(y)} labels")
        result = certify_forward(
            self.get_logits, (x, y), self.perturbation, test=self.test, kappa=self.kappa, alpha=self.alpha,
            budget=self.budget, label_free=self.label_free, batch_size=self.batch_size, device=device,
            seed=self.seed, return_counterexamples=True, stream_offset=self.inputs_seen,
        )
        self.inputs_seen += len(x)
        self._last_result = result
        assert result.counterexamples is not None
        return result.counterexamples.to(device=device, dtype=images.dtype)

"""NERO's plain MNIST CNN, layer for layer (architecture ``"nero-cnn"``).

Zhao, Matsuzawa, Irvine, Maire, Kindlmann, "Evaluating Machine Learning Models with NERO:
Non-Equivariance Revealed on Orbits", arXiv 2305.19889, compared on MNIST a plain CNN, the same
CNN trained with rotation augmentation, and an E(2)-steerable CNN. :class:`NeroCNN` is that plain
CNN with the layer shapes of the authors' public code; :class:`~orbitscope.models.reference.ReferenceCNN`
is our own, much smaller CNN of the same layout idea (six conv blocks, three average pools, a
576 -> 64 -> 10 head), not this network.

Layer list (29x29 input, as NERO fed it; every convolution has no bias and is followed by
BatchNorm2d and ReLU; spatial sizes per side on the right)::

    pad right/bottom by 1                       28 -> 29
    conv 7x7,   1 -> 24, padding 1              29 -> 25
    conv 5x5,  24 -> 48, padding 2              25 -> 25
    avg-pool 2 (stride 2)                       25 -> 12
    conv 5x5,  48 -> 48, padding 2              12 -> 12
    conv 5x5,  48 -> 96, padding 2              12 -> 12
    avg-pool 2 (stride 2)                       12 -> 6
    conv 5x5,  96 -> 96, padding 2               6 -> 6
    conv 5x5,  96 -> 64, padding 1               6 -> 4
    avg-pool 2, stride 1                         4 -> 3
    flatten 64 * 3 * 3 = 576
    Linear 576 -> 64, BatchNorm1d, ELU
    Linear 64 -> 10

So the stated paddings do give the 576-feature flatten (checked in ``tests/test_nero_cnn.py``).
625,234 parameters for one input channel and ten classes.

Differences from NERO's code, all deliberate:

* **Input.** orbitscope feeds 28x28 images with values in ``[0, 1]``; the model itself pads them
  right and bottom by one zero pixel to NERO's 29x29 (the padding is part of :meth:`NeroCNN.forward`,
  so orbit transforms act on the 28x28 image exactly as for every other model).
* **Normalisation inside the model.** Like every orbitscope model (see
  :mod:`orbitscope.models.reference`: "any normalisation is the model's own business"), the
  recipes and the demo hand the model raw ``[0, 1]`` images and pass no ``normalize`` to
  :func:`orbitscope.engine.evaluation.evaluate`; so ``forward`` computes ``(x - mean) / std`` with
  MNIST's ``mean = 0.1307``, ``std = 0.3081``. NERO applied ``Normalize(0.1307, 0.3081)`` to
  0–255 pixel values (a quirk: those constants are for ``[0, 1]`` values, so its inputs spanned
  about −0.42 … 827); we apply them to ``[0, 1]`` values as they were meant. The 1-pixel padding
  is applied *before* normalising, so the padded row and column equal the image background
  exactly (NERO padded after normalising with 0, which on its 0–255 scale is indistinguishable
  from the background).
* **Logits out.** NERO's network ends in a softmax (and was trained with ``CrossEntropyLoss`` on
  those probabilities); ours returns logits, and the classification task applies the softmax.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .registry import register_model

__all__ = ["NeroCNN", "NERO_MNIST_MEAN", "NERO_MNIST_STD"]

#: MNIST mean and std of ``[0, 1]`` pixel values (the constants NERO used).
NERO_MNIST_MEAN = 0.1307
NERO_MNIST_STD = 0.3081

#: ``(kernel, out_channels, padding)`` of the six conv blocks; an average pool follows blocks 2 and 4
#: (2x2, stride 2) and block 6 (2x2, stride 1).
CONV_BLOCKS: tuple[tuple[int, int, int], ...] = ((7, 24, 1), (5, 48, 2), (5, 48, 2), (5, 96, 2), (5, 96, 2), (5, 64, 1))
_INPUT_SIDE = 28  # orbitscope's MNIST images; padded to 29 inside the model
_FEATURE_SIDE = 3  # 29 -> 25 -> 25 -> 12 -> 12 -> 12 -> 6 -> 6 -> 4 -> 3


class NeroCNN(nn.Module):
    """NERO's plain MNIST CNN (Zhao et al., arXiv 2305.19889); see the module docs for the layers.

    ``features`` is a flat ``nn.Sequential`` of ``[Conv2d(bias=False), BatchNorm2d, ReLU]`` blocks
    and average pools (so :func:`~orbitscope.models.reference.fold_batchnorm` folds every
    conv/BatchNorm pair), ``classifier`` is ``Flatten -> Linear(576, 64) -> BatchNorm1d -> ELU ->
    Linear(64, num_classes)``.

    Input: ``(B, in_channels, 28, 28)`` with values in ``[0, 1]``; :meth:`forward` pads right and
    bottom by one zero pixel to 29x29, then normalises with ``(x - mean) / std``. Output: logits
    ``(B, num_classes)``. Any other image size raises ``ValueError``.

    Args:
        in_channels: image channels (NERO: 1).
        num_classes: number of output logits (NERO: 10).
        mean: normalisation of the ``[0, 1]`` input, one value for all channels
            (default MNIST's 0.1307).
        std: the normalisation's standard deviation, one value for all channels
            (default MNIST's 0.3081).
    """

    arch_name = "nero-cnn"
    __jit_unused_properties__ = ["config"]

    def __init__(self, in_channels: int = 1, num_classes: int = 10, mean: float = NERO_MNIST_MEAN,
                 std: float = NERO_MNIST_STD) -> None:
        super().__init__()
        if int(in_channels) < 1 or int(num_classes) < 1:
            raise ValueError(f"in_channels and num_classes must be positive, got {in_channels}, {num_classes}")
        if not float(std) > 0:
            raise ValueError(f"std must be > 0, got {std}")
        self.in_channels = int(in_channels)
        self.num_classes = int(num_classes)
        self.mean = float(mean)
        self.std = float(std)
        layers: list[nn.Module] = []
        prev = self.in_channels
        for i, (kernel, width, padding) in enumerate(CONV_BLOCKS):
            layers += [nn.Conv2d(prev, width, kernel_size=kernel, padding=padding, bias=False),
                       nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
            if i in (1, 3):
                layers.append(nn.AvgPool2d(kernel_size=2, stride=2))
            prev = width
        layers.append(nn.AvgPool2d(kernel_size=2, stride=1))
        self.features = nn.Sequential(*layers)
        self.n_features = prev * _FEATURE_SIDE * _FEATURE_SIDE  # 576
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(self.n_features, 64),
            nn.BatchNorm1d(64),
            nn.ELU(inplace=True),
            nn.Linear(64, self.num_classes),
        )

    @property
    def config(self) -> dict[str, Any]:
        """JSON-able config such that ``build_model(config)`` rebuilds this architecture."""
        return {"arch": self.arch_name, "in_channels": self.in_channels, "num_classes": self.num_classes,
                "mean": self.mean, "std": self.std}

    def _check_input(self, x: Tensor) -> None:
        if not isinstance(x, Tensor) or x.dim() != 4 or x.shape[1] != self.in_channels \
                or tuple(x.shape[-2:]) != (_INPUT_SIDE, _INPUT_SIDE):
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"NeroCNN expects images of shape (B, {self.in_channels}, 28, 28) in [0, 1] "
                             f"(it pads them to NERO's 29x29 itself), got {got}")

    def forward(self, x: Tensor) -> Tensor:
        """Map 28x28 images ``(B, C, 28, 28)`` in ``[0, 1]`` to logits ``(B, num_classes)``."""
        if not (torch.jit.is_scripting() or torch.jit.is_tracing()):
            self._check_input(x)
        x = F.pad(x, (0, 1, 0, 1))  # right and bottom by one pixel: 28x28 -> NERO's 29x29
        x = (x - self.mean) / self.std
        return self.classifier(self.features(x))


register_model(NeroCNN.arch_name, NeroCNN)

"""More architectures for model zoos (ML4ML's database mixed architectures): a VGG-style network
with BatchNorm and a small residual network. Like :class:`~orbitscope.models.reference.SmallCNN`
they name their last two convolutions ``conv2`` and ``conv3`` (the layers ML4ML probes; their raw
outputs, before BatchNorm), take any grey or colour image of at least 12 × 12 pixels, and are
registered for :func:`~orbitscope.models.registry.build_model` (``"vgg_bn"``, ``"small_resnet"``).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from .reference import ZooConvNet
from .registry import register_model

__all__ = ["VGGBN", "SmallResNet"]


class VGGBN(ZooConvNet):
    """VGG-style: ``[conv1a → BN → ReLU → conv1b → BN → ReLU → max-pool 2]``,
    ``[conv2 → BN → ReLU → max-pool 2]``, ``[conv3 → BN → ReLU]``, adaptive average pool to 3 × 3,
    ``fc1 → ReLU → dropout-free fc2``; 3 × 3 convolutions with padding 1 (ML4ML used VGG13-BN on
    CIFAR-10; this is its small cousin for 28 × 28 digits).

    Args:
        in_channels: image channels.
        num_classes: output logits.
        widths: output channels of the three stages.
        hidden: width of ``fc1``.
    """

    arch_name = "vgg_bn"

    def __init__(self, in_channels: int = 1, num_classes: int = 10, widths: Sequence[int] = (16, 32, 64),
                 hidden: int = 64) -> None:
        super().__init__(in_channels, num_classes, widths, hidden)
        w1, w2, w3 = self.widths
        self.conv1a = nn.Conv2d(in_channels, w1, 3, padding=1, bias=False)
        self.bn1a = nn.BatchNorm2d(w1)
        self.conv1b = nn.Conv2d(w1, w1, 3, padding=1, bias=False)
        self.bn1b = nn.BatchNorm2d(w1)
        self.conv2 = nn.Conv2d(w1, w2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(w2)
        self.conv3 = nn.Conv2d(w2, w3, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(w3)
        self.pool = nn.MaxPool2d(2)
        self.squeeze = nn.AdaptiveAvgPool2d(3)
        self.fc1 = nn.Linear(w3 * 9, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        self.check_input(x)
        x = torch.relu(self.bn1a(self.conv1a(x)))
        x = self.pool(torch.relu(self.bn1b(self.conv1b(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        x = self.squeeze(torch.relu(self.bn3(self.conv3(x))))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class _Residual(nn.Module):
    """``x + BN(conv(ReLU(BN(conv(x)))))`` then ReLU, at constant width."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv_a = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(width)
        self.conv_b = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn_b = nn.BatchNorm2d(width)

    def forward(self, x: Tensor) -> Tensor:
        y = self.bn_b(self.conv_b(torch.relu(self.bn_a(self.conv_a(x)))))
        return torch.relu(x + y)


class SmallResNet(ZooConvNet):
    """A small residual network: ``conv1 → BN → ReLU → block(w1) → max-pool 2``, ``conv2 → BN →
    ReLU → block(w2) → max-pool 2``, ``conv3 → BN → ReLU → block(w3)``, adaptive average pool to
    1 × 1, ``fc``. ``conv2`` and ``conv3`` are the widening convolutions before the last two
    residual blocks.

    Args:
        in_channels: image channels.
        num_classes: output logits.
        widths: channels of the three stages.
        hidden: unused by the layers (kept so every zoo architecture takes the same arguments).
    """

    arch_name = "small_resnet"

    def __init__(self, in_channels: int = 1, num_classes: int = 10, widths: Sequence[int] = (16, 32, 64),
                 hidden: int = 64) -> None:
        super().__init__(in_channels, num_classes, widths, hidden)
        w1, w2, w3 = self.widths
        self.conv1 = nn.Conv2d(in_channels, w1, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(w1)
        self.block1 = _Residual(w1)
        self.conv2 = nn.Conv2d(w1, w2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(w2)
        self.block2 = _Residual(w2)
        self.conv3 = nn.Conv2d(w2, w3, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(w3)
        self.block3 = _Residual(w3)
        self.pool = nn.MaxPool2d(2)
        self.squeeze = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(w3, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        self.check_input(x)
        x = self.pool(self.block1(torch.relu(self.bn1(self.conv1(x)))))
        x = self.pool(self.block2(torch.relu(self.bn2(self.conv2(x)))))
        x = self.squeeze(self.block3(torch.relu(self.bn3(self.conv3(x)))))
        return self.fc(x.flatten(1))


register_model(VGGBN.arch_name, VGGBN)
register_model(SmallResNet.arch_name, SmallResNet)

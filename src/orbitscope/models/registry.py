"""The architecture registry: ``build_model({"arch": name, **kwargs})`` for saved-model configs.

Architectures register themselves in their own modules (:mod:`.reference`, :mod:`.equivariant`);
importing :mod:`orbitscope.models` imports those, so every built-in name is known.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from torch import nn

from .._registry import Registry
from ..errors import SpecError

__all__ = ["ARCHITECTURES", "register_model", "list_models", "build_model", "check_arch_args"]

#: Registered architectures: name -> factory(**kwargs) -> nn.Module.
ARCHITECTURES: Registry[Callable[..., nn.Module]] = Registry("architecture", key="arch")


def register_model(name: str, factory: Callable[..., nn.Module]) -> None:
    """Register ``factory(**kwargs) -> nn.Module`` under ``name`` for :func:`build_model`."""
    if not name or not isinstance(name, str):
        raise SpecError("model name must be a non-empty string")
    ARCHITECTURES.register(name, factory, replace=True)


def list_models() -> list[str]:
    """Names of the registered architectures (sorted)."""
    return ARCHITECTURES.names()


def build_model(config: dict[str, Any]) -> nn.Module:
    """Build an untrained model from a config dict ``{"arch": name, **kwargs}``.

    Raises:
        SpecError (a ValueError): if ``config`` has no ``"arch"`` or names an unknown architecture.
        TypeError: if the remaining keys are not accepted by the constructor.
    """
    if not isinstance(config, dict) or "arch" not in config:
        raise SpecError(f"model config must be a dict with an 'arch' key, got {config!r}")
    if config["arch"] not in ARCHITECTURES:
        raise SpecError(f"unknown architecture {config['arch']!r}; registered: {list_models()}")
    return ARCHITECTURES.from_spec(config)


def check_arch_args(arch: str, in_channels: int, num_classes: int, widths: Sequence[int], hidden: int,
                    n_widths: int) -> tuple[int, ...]:
    """Validate the constructor arguments shared by the reference architectures; returns the widths."""
    widths = tuple(int(w) for w in widths)
    if len(widths) != n_widths:
        raise ValueError(f"{arch} needs exactly {n_widths} conv widths, got {len(widths)}: {widths}")
    if in_channels < 1 or num_classes < 1 or hidden < 1 or min(widths) < 1:
        raise ValueError("in_channels, num_classes, hidden and widths must all be positive")
    return widths

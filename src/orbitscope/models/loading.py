"""Saving and loading models: orbitscope safetensors files and user-supplied models.

File conventions
----------------
* :func:`save_model` writes a ``.safetensors`` file holding the model's state dict.
  Its (string-only) safetensors metadata carries ``"format": "orbitscope/1"``, the
  model config as JSON under ``"config"`` (see :mod:`orbitscope.models.reference`), and any
  extra metadata (non-string values are JSON-encoded). Writes are atomic
  (temporary file in the same directory, then ``os.replace``).
* :func:`load_model` rebuilds a registered architecture from such a file.
* :func:`load_user_model` loads arbitrary user models from ``"package.module:factory"``
  (+ optional weights: ``.safetensors`` or a ``torch.save``'d state dict), from a
  TorchScript archive or from a ``torch.export`` archive (``.pt2``).

All loaded models live on the CPU and are returned in eval mode (``torch.export``
graphs cannot switch mode: export them in eval mode).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import tempfile
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from .reference import model_hash, set_eval_mode
from .registry import build_model
from ..errors import StateDictMismatchError

__all__ = [
    "StateDictMismatchError",
    "save_model",
    "load_model",
    "read_metadata",
    "load_state_dict_file",
    "load_user_model",
    "describe_model",
]

logger = logging.getLogger(__name__)

FORMAT_TAG = "orbitscope/1"
_STRIPPABLE_PREFIXES = ("module.", "_orig_mod.")


def _unwrap(model: nn.Module) -> nn.Module:
    """Strip a ``torch.compile`` wrapper (its state-dict keys carry an ``_orig_mod.`` prefix)."""
    return getattr(model, "_orig_mod", model)


def _check_file(path: str | os.PathLike[str], what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: '{p}'")
    return p


# --------------------------------------------------------------------------- orbitscope files


def save_model(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    config: dict[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Atomically write ``model``'s state dict to a safetensors file.

    Args:
        model: the model (a ``torch.compile`` wrapper is unwrapped).
        path: destination; parent directories are created.
        config: model config for :func:`load_model`; defaults to ``model.config``
            when the model has one (e.g. :class:`~orbitscope.models.reference.ReferenceCNN`).
        metadata: extra metadata; strings are stored as is, other values as JSON.

    Returns:
        The path written.
    """
    model = _unwrap(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if config is None:
        cfg = getattr(model, "config", None)
        config = cfg if isinstance(cfg, dict) else None
    meta: dict[str, str] = {"format": FORMAT_TAG}
    for key, value in (metadata or {}).items():
        meta[str(key)] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if config is not None:
        meta["config"] = json.dumps(config, sort_keys=True)
    # clone: safetensors refuses tensors that share storage; contiguous: required by the format.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=meta)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600 files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    logger.debug("saved %s (%d tensors) to %s", type(model).__name__, len(tensors), path)
    return path


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """Return the (string) metadata of a safetensors file (empty dict if none)."""
    p = _check_file(path, "safetensors file")
    with safe_open(str(p), framework="pt") as f:
        return dict(f.metadata() or {})


def _load_strict(model: nn.Module, state: Mapping[str, Tensor], source: str) -> None:
    """Strictly load ``state`` into ``model``; raise :class:`StateDictMismatchError` listing problems."""
    expected = set(model.state_dict().keys())
    state = dict(state)
    given = set(state)
    if given != expected:
        for prefix in _STRIPPABLE_PREFIXES:
            if given and all(k.startswith(prefix) for k in given):
                stripped = {k[len(prefix) :]: v for k, v in state.items()}
                if set(stripped) == expected:
                    logger.info("stripped key prefix %r from weights in %s", prefix, source)
                    state, given = stripped, set(stripped)
                    break
    missing, unexpected = sorted(expected - given), sorted(given - expected)
    if missing or unexpected:
        raise StateDictMismatchError(
            f"weights in {source} do not match {type(model).__name__}: "
            f"missing keys {missing}, unexpected keys {unexpected}",
            missing,
            unexpected,
        )
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # shape mismatches
        raise StateDictMismatchError(
            f"weights in {source} do not fit {type(model).__name__}: {exc}", [], []
        ) from exc


def load_model(path: str | os.PathLike[str]) -> nn.Module:
    """Rebuild a registered model from an orbitscope safetensors file (eval mode, CPU).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file carries no ``"config"`` metadata (use
            :func:`load_user_model` with a ``"module:factory"`` spec instead).
        StateDictMismatchError: weights do not fit the configured architecture.
    """
    p = _check_file(path, "model file")
    meta = read_metadata(p)
    if "config" not in meta:
        raise ValueError(
            f"'{p}' carries no model config in its safetensors metadata, so its architecture is unknown; "
            f"load it with load_user_model('package.module:factory', weights='{p}') using a factory that "
            f"builds the architecture"
        )
    config = json.loads(meta["config"])
    model = build_model(config)
    _load_strict(model, load_file(str(p), device="cpu"), f"'{p}'")
    return model.eval()


# --------------------------------------------------------------------------- user models


def load_state_dict_file(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """Read a state dict from ``.safetensors`` or a ``torch.save`` file (``weights_only=True``).

    A ``torch.save``'d dict with a ``"state_dict"`` entry (a common checkpoint layout) is accepted.
    """
    p = _check_file(path, "weights file")
    if p.suffix == ".safetensors":
        return load_file(str(p), device="cpu")
    if _zip_kind(p) in ("torchscript", "export"):
        raise ValueError(f"'{p}' is a {_zip_kind(p)} archive, not a state dict; pass it as the spec instead")
    try:
        obj = torch.load(str(p), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise ValueError(
            f"could not read weights from '{p}' with torch.load(weights_only=True): {exc}. "
            f"Save a state dict (torch.save(model.state_dict(), path)) or a .safetensors file."
        ) from exc
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping) or not all(isinstance(v, Tensor) for v in obj.values()):
        raise TypeError(
            f"'{p}' does not contain a state dict (mapping of name -> tensor), got {type(obj).__name__}"
        )
    return dict(obj)


def _zip_kind(path: Path) -> str:
    """Classify a file: ``'export'``, ``'torchscript'``, ``'torch_save'``, ``'zip'`` or ``'other'``."""
    if not zipfile.is_zipfile(path):
        return "other"
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    tails = {n.split("/", 1)[1] if "/" in n else n for n in names}
    if "archive_format" in tails or any(t.startswith("models/") and t.endswith(".json") for t in tails):
        return "export"
    if "constants.pkl" in tails or any(t.startswith("code/") for t in tails):
        return "torchscript"
    if "data.pkl" in tails:
        return "torch_save"
    return "zip"


def _load_archive(p: Path) -> nn.Module:
    kind = _zip_kind(p)
    if kind == "export":
        return torch.export.load(str(p)).module()
    if kind == "torchscript":
        with warnings.catch_warnings():  # TorchScript is deprecated upstream but still supported here
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(p), map_location="cpu")
    if kind == "torch_save":
        raise ValueError(
            f"'{p}' is a torch.save file (e.g. a state dict), not a TorchScript or torch.export archive; "
            f"load it with load_user_model('package.module:factory', weights='{p}')"
        )
    if kind == "zip":  # unknown zip layout: try both loaders
        errors = []
        for loader in (lambda: torch.jit.load(str(p), map_location="cpu"), lambda: torch.export.load(str(p)).module()):
            try:
                return loader()
            except Exception as exc:  # noqa: BLE001 - report all below
                errors.append(repr(exc))
        raise ValueError(f"'{p}' is neither a TorchScript nor a torch.export archive: {errors}")
    raise ValueError(
        f"'{p}' is not a TorchScript or torch.export (.pt2) archive; for weights files use "
        f"load_user_model('package.module:factory', weights=...)"
    )


def _resolve_factory(spec: str) -> Any:
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ValueError(f"factory spec must look like 'package.module:factory', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"cannot import module '{module_name}' from spec {spec!r}: {exc}. "
            f"Is it installed or on sys.path / PYTHONPATH?"
        ) from exc
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"module '{module_name}' has no attribute '{attr_path}' (spec {spec!r})")
        obj = getattr(obj, part)
    return obj


def load_user_model(
    spec: str,
    weights: str | os.PathLike[str] | None = None,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
) -> nn.Module:
    """Load a user model (eval mode, CPU).

    Args:
        spec: either ``"package.module:factory"`` (``factory`` may be a dotted
            attribute path, e.g. a class) or the path of a TorchScript archive or a
            ``torch.export`` archive (``.pt2``); the kind of archive is detected from
            its contents, not its extension. An orbitscope ``.safetensors`` file with
            a config is also accepted (delegates to :func:`load_model`).
        weights: for a factory spec, optional ``.safetensors`` or ``torch.save`` state
            dict (or ``{"state_dict": ...}``) loaded strictly. Not allowed for archives.
        factory_kwargs: keyword arguments for ``factory``.

    Raises:
        FileNotFoundError: the spec or weights file does not exist.
        ImportError / AttributeError: module not importable / attribute missing.
        TypeError: the factory is not callable or does not return an ``nn.Module``.
        ValueError: weights given for an archive, or an unrecognised file.
        StateDictMismatchError: weights do not match (lists missing/unexpected keys).
    """
    spec = os.fspath(spec)
    path = Path(spec)
    if path.is_file():
        if weights is not None:
            raise ValueError(
                f"weights were given for '{spec}', but a TorchScript/torch.export/orbitscope file "
                f"already contains its weights; pass weights only with a 'package.module:factory' spec"
            )
        if path.suffix == ".safetensors":
            return load_model(path)
        return set_eval_mode(_load_archive(path))
    looks_like_path = os.sep in spec or path.suffix in (".pt", ".pt2", ".pth", ".ts", ".jit", ".safetensors")
    if ":" not in spec or looks_like_path and not spec.split(":", 1)[0].replace(".", "").isidentifier():
        raise FileNotFoundError(f"model file not found: '{spec}' (and it is not a 'package.module:factory' spec)")

    factory = _resolve_factory(spec)
    if not callable(factory):
        raise TypeError(f"'{spec}' resolves to a {type(factory).__name__}, which is not callable")
    model = factory(**dict(factory_kwargs or {}))
    if not isinstance(model, nn.Module):
        raise TypeError(f"factory '{spec}' returned {type(model).__name__}, expected a torch.nn.Module")
    if weights is None:
        logger.warning("load_user_model(%r): no weights given, the model keeps its initial parameters", spec)
    else:
        _load_strict(model, load_state_dict_file(weights), f"'{weights}'")
    return model.to("cpu").eval()


def describe_model(model: nn.Module) -> dict[str, Any]:
    """Summary: class name, parameter counts, :func:`~orbitscope.models.reference.model_hash`, config if any."""
    inner = _unwrap(model)
    params = list(inner.parameters())
    info: dict[str, Any] = {
        "class_name": type(inner).__name__,
        "n_parameters": int(sum(p.numel() for p in params)),
        "n_trainable": int(sum(p.numel() for p in params if p.requires_grad)),
        "hash": model_hash(inner),
    }
    cfg = getattr(inner, "config", None)
    if isinstance(cfg, dict):
        info["config"] = cfg
    return info

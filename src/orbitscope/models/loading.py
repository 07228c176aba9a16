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
  TorchScript archive, from a ``torch.export`` archive (``.pt2``) or from an ``.onnx`` file
  (run by ONNX Runtime).

All loaded models live on the CPU and are returned in eval mode (``torch.export``
graphs cannot switch mode: export them in eval mode).

File kinds are told by their first bytes, never by their extension: a zip archive (``PK\x03\x04``:
``torch.save``'s default format, TorchScript, ``torch.export``), a legacy ``torch.save`` pickle
(``\x80`` + protocol byte) or safetensors (8-byte little-endian header length, then ``{``). A
pickle where safetensors is expected (e.g. ``torch.save(sd, "w.safetensors")``) raises
:class:`~orbitscope.errors.SpecError` saying so and how to convert it, and is never unpickled;
an empty, truncated or corrupt safetensors file raises :class:`~orbitscope.errors.ModelError`.
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
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from .reference import model_hash, set_eval_mode
from .registry import build_model
from ..errors import ModelError, SpecError, StateDictMismatchError
from ..trust import UntrustedFileError, require_trust

__all__ = [
    "StateDictMismatchError",
    "save_model",
    "load_model",
    "read_metadata",
    "load_state_dict_file",
    "load_user_model",
    "resolve_factory",
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
    if p.is_dir():
        raise IsADirectoryError(f"{what} '{p}' is a directory, not a file")
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: '{p}'")
    return p


_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")


def _file_format(p: Path) -> str:
    """What ``p`` holds, from its first bytes: ``'empty'``, ``'zip'`` (torch.save's default format,
    TorchScript or torch.export archives), ``'pickle'`` (a legacy torch.save pickle),
    ``'safetensors'`` (8-byte header length then ``{``) or ``'unknown'``."""
    if p.stat().st_size == 0:
        return "empty"
    with open(p, "rb") as fh:
        head = fh.read(9)
    if head[:4] in _ZIP_MAGICS:
        return "zip"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle"
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    return "unknown"


def _pickle_message(p: Path, role: str) -> str:
    return (
        f"'{p}' is a PyTorch pickle (torch.save) file, not safetensors (told by its first bytes, not its name); "
        f"convert it with: python -c \"import torch; from safetensors.torch import save_file; "
        f"save_file(torch.load('{p}', weights_only=True), '{p.with_suffix('')}.converted.safetensors')\", "
        + (f"or {role}" if p.suffix in (".pt", ".pth") else f"or rename it to .pt and {role}")
    )


_AS_WEIGHTS = "pass it as the weights of a 'package.module:factory' model (load_user_model(spec, weights=...))"


def _check_safetensors(p: Path, role: str = _AS_WEIGHTS) -> None:
    """Raise a one-line error unless ``p`` looks like a complete safetensors file."""
    fmt = _file_format(p)
    size = p.stat().st_size
    if fmt == "empty":
        raise ModelError(f"'{p}' is empty (0 bytes), not a safetensors file (an interrupted save or download?); "
                         "write it again with orbitscope.models.save_model or safetensors.torch.save_file")
    if fmt == "pickle":
        raise SpecError(_pickle_message(p, role))
    if fmt == "zip":
        kind = _zip_kind(p)
        if kind == "torch_save":
            raise SpecError(_pickle_message(p, role))
        if kind in ("torchscript", "export"):
            name = "TorchScript" if kind == "torchscript" else "torch.export"
            raise SpecError(f"'{p}' is a {name} archive, not safetensors: it holds a whole model; "
                            f"load it as the model itself: load_user_model('{p}')")
        raise SpecError(f"'{p}' is a zip archive, not a safetensors file")
    if fmt == "unknown":
        if size < 9:
            raise ModelError(f"'{p}' is truncated ({size} bytes): a safetensors file starts with an 8-byte header "
                             "length and a JSON header; write or download it again")
        raise SpecError(f"'{p}' is not a safetensors file (it does not start with a safetensors header); pass a file "
                        "written by safetensors.torch.save_file or orbitscope.models.save_model")
    with open(p, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if 8 + n > size:
            raise ModelError(f"'{p}' is truncated: its safetensors header is {n} bytes but only {size - 8} follow; "
                             "write or download it again")
        try:
            header = json.loads(fh.read(n))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (ValueError, UnicodeDecodeError, TypeError, KeyError, IndexError, AttributeError):
            raise ModelError(f"'{p}' has a corrupt safetensors header; write or download it again") from None
    need = 8 + n + max(ends, default=0)
    if need > size:
        raise ModelError(f"'{p}' is truncated: its header describes {need} bytes but the file has {size}; "
                         "write or download it again (an interrupted save or a partial download)")


def _read_safetensors(p: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(p), device="cpu")
    except SafetensorError as exc:
        raise ModelError(f"'{p}' is not a valid safetensors file ({exc}); write or download it again") from exc


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
    _check_safetensors(p)
    try:
        with safe_open(str(p), framework="pt") as f:
            return dict(f.metadata() or {})
    except SafetensorError as exc:
        raise ModelError(f"'{p}' is not a valid safetensors file ({exc}); write or download it again") from exc


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
        SpecError (a ValueError): the file carries no ``"config"`` metadata (use
            :func:`load_user_model` with a ``"module:factory"`` spec instead), or it is not a
            safetensors file (e.g. a ``torch.save`` pickle: the message says how to convert it).
        ModelError: the file is empty, truncated or corrupt.
        StateDictMismatchError: weights do not fit the configured architecture.
    """
    p = _check_file(path, "model file")
    _check_safetensors(p, role="load it with load_user_model('package.module:factory', weights=...)")
    meta = read_metadata(p)
    if "config" not in meta:
        raise SpecError(
            f"'{p}' carries no model config in its safetensors metadata, so its architecture is unknown; "
            f"load it with load_user_model('package.module:factory', weights='{p}') using a factory that "
            f"builds the architecture"
        )
    try:
        config = json.loads(meta["config"])
    except ValueError:
        raise ModelError(f"'{p}' has a corrupt model config in its metadata (not JSON): {meta['config'][:80]!r}") from None
    model = build_model(config)
    _load_strict(model, _read_safetensors(p), f"'{p}'")
    return model.eval()


# --------------------------------------------------------------------------- user models


def load_state_dict_file(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """Read a state dict from ``.safetensors`` or a ``torch.save`` file (``weights_only=True``).

    A ``torch.save``'d dict with a ``"state_dict"`` entry (a common checkpoint layout) is accepted.
    The format is told by the contents: a safetensors file is read as such whatever its name, and
    a file named ``.safetensors`` must be one (a pickle there raises a SpecError saying how to
    convert it; it is not unpickled).
    """
    p = _check_file(path, "weights file")
    fmt = _file_format(p)
    if p.suffix == ".safetensors" or fmt == "safetensors":
        _check_safetensors(p)
        return _read_safetensors(p)
    if fmt == "empty":
        raise ModelError(f"weights file '{p}' is empty (0 bytes): an interrupted save or download? write it again "
                         "with torch.save(model.state_dict(), path) or safetensors.torch.save_file")
    if fmt == "zip" and _zip_kind(p) in ("torchscript", "export"):
        raise SpecError(f"'{p}' is a {_zip_kind(p)} archive, not a state dict; pass it as the spec instead")
    try:
        obj = torch.load(str(p), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise SpecError(
            f"could not read weights from '{p}' with torch.load(weights_only=True): {exc}. "
            f"Save a state dict (torch.save(model.state_dict(), path)) or a .safetensors file."
        ) from exc
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        obj = obj["state_dict"]
    if not isinstance(obj, Mapping) or not all(isinstance(v, Tensor) for v in obj.values()):
        raise ModelError(
            f"'{p}' does not contain a state dict (mapping of name -> tensor), got {type(obj).__name__}; save "
            "model.state_dict(), not the model or a list"
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


def _load_archive(p: Path, trust: bool = False) -> nn.Module:
    fmt = _file_format(p)
    if fmt == "empty":
        raise ModelError(f"model file '{p}' is empty (0 bytes): an interrupted save or download? write it again")
    if fmt == "pickle":
        raise SpecError(
            f"'{p}' is a legacy torch.save pickle (e.g. a state dict), not a TorchScript or torch.export archive; "
            f"load it with load_user_model('package.module:factory', weights='{p}')"
        )
    kind = _zip_kind(p)
    try:
        if kind == "export":
            return torch.export.load(str(p)).module()
        if kind == "torchscript":
            require_trust(p, "a TorchScript archive (a program: it can create and overwrite files while loading and "
                          "in forward)", trust)
            with warnings.catch_warnings():  # TorchScript is deprecated upstream but still supported here
                warnings.simplefilter("ignore", DeprecationWarning)
                return torch.jit.load(str(p), map_location="cpu")
    except UntrustedFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch raises many types for damaged archives
        what = "torch.export" if kind == "export" else "TorchScript"
        raise ModelError(f"'{p}' looks like a {what} archive but cannot be loaded (damaged, truncated, or written by "
                         f"another torch version?): {type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from exc
    if kind == "torch_save":
        raise SpecError(
            f"'{p}' is a torch.save file (e.g. a state dict), not a TorchScript or torch.export archive; "
            f"load it with load_user_model('package.module:factory', weights='{p}')"
        )
    if kind == "zip":  # unknown zip layout: try both loaders
        require_trust(p, "a model archive of unknown layout (TorchScript, which can run code, is tried)", trust)
        errors = []
        for loader in (lambda: torch.jit.load(str(p), map_location="cpu"), lambda: torch.export.load(str(p)).module()):
            try:
                return loader()
            except Exception as exc:  # noqa: BLE001 - report all below
                errors.append(repr(exc))
        raise SpecError(f"'{p}' is neither a TorchScript nor a torch.export archive: {errors}")
    if p.suffix == ".py":
        raise SpecError(f"'{p}' is Python source, not a model file; name the function that builds the model as "
                        f"'{p.stem}:factory' (with {p.parent} on PYTHONPATH)")
    raise SpecError(
        f"'{p}' is not a TorchScript or torch.export (.pt2) archive; for weights files use "
        f"load_user_model('package.module:factory', weights=...)"
    )


def resolve_factory(spec: str) -> Any:
    """The object named by ``'package.module:attr[.attr…]'`` (imported; errors say what is missing)."""
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise SpecError(f"factory spec must look like 'package.module:factory', got {spec!r}")
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
            raise SpecError(f"module '{module_name}' has no attribute '{attr_path}' (spec {spec!r}); name a function "
                            "or class defined in that module")
        obj = getattr(obj, part)
    return obj


def load_user_model(
    spec: str,
    weights: str | os.PathLike[str] | None = None,
    *,
    factory_kwargs: Mapping[str, Any] | None = None,
    trust: bool = False,
) -> nn.Module:
    """Load a user model (eval mode, CPU).

    Args:
        spec: either ``"package.module:factory"`` (``factory`` may be a dotted
            attribute path, e.g. a class) or the path of a TorchScript archive or a
            ``torch.export`` archive (``.pt2``); the kind of archive is detected from
            its contents, not its extension. An orbitscope ``.safetensors`` file with
            a config is also accepted (delegates to :func:`load_model`), and an ``.onnx``
            file runs through ONNX Runtime (:class:`~orbitscope.models.onnx_model.OnnxModel`;
            told by its extension: ONNX files have no magic bytes).
        weights: for a factory spec, optional ``.safetensors`` or ``torch.save`` state
            dict (or ``{"state_dict": ...}``) loaded strictly. Not allowed for archives.
        factory_kwargs: keyword arguments for ``factory``.
        trust: load a TorchScript archive (a program, see :mod:`orbitscope.trust`); without it
            TorchScript files are refused with an :class:`~orbitscope.trust.UntrustedFileError`.

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
            raise SpecError(
                f"weights were given for '{spec}', but a TorchScript/torch.export/orbitscope file "
                f"already contains its weights; pass weights only with a 'package.module:factory' spec"
            )
        if path.suffix == ".safetensors" or _file_format(path) == "safetensors":
            return load_model(path)
        if path.suffix.lower() == ".onnx":  # a protobuf: no magic bytes to tell it by
            from .onnx_model import load_onnx_model

            return load_onnx_model(path)
        archive = set_eval_mode(_load_archive(path, trust))
        if not isinstance(archive, torch.jit.ScriptModule):  # a torch.export graph: workers load the same file
            archive.orbitscope_archive = str(path.resolve())
        return archive
    looks_like_path = os.sep in spec or path.suffix in (".pt", ".pt2", ".pth", ".ts", ".jit", ".safetensors", ".onnx")
    if ":" not in spec or looks_like_path and not spec.split(":", 1)[0].replace(".", "").isidentifier():
        raise FileNotFoundError(f"model file not found: '{spec}' (and it is not a 'package.module:factory' spec)")

    factory = resolve_factory(spec)
    if not callable(factory):
        raise SpecError(f"'{spec}' resolves to a {type(factory).__name__}, which is not callable; name the function "
                        "or class that builds the model")
    try:
        model = factory(**dict(factory_kwargs or {}))
    except Exception as exc:  # noqa: BLE001 - the user's code: report it as the model's failure
        raise ModelError(f"the model factory '{spec}' raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise ModelError(f"factory '{spec}' returned {type(model).__name__}, expected a torch.nn.Module")
    if weights is None:
        logger.warning("load_user_model(%r): no weights given, the model keeps its initial parameters", spec)
    else:
        _load_strict(model, load_state_dict_file(weights), f"'{weights}'")
    # how to build it again elsewhere (orbitscope.engine.shipping: Ray workers rebuild it from this)
    model.orbitscope_factory = {"factory": spec, "kwargs": dict(factory_kwargs or {})}
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

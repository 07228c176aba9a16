"""Sending work to other processes or machines by reference, not as pickled closures.

A distributed executor (Ray) sends each job's shared context to its workers once. What it sends
is the context *shipped*: the model as a :class:`ModelRef` (how to build its architecture, and its
current weights as bytes) and the data as a :class:`DataRef` (its data spec, or its arrays); a
worker *lands* the context, rebuilding the model and re-opening the data, and checks that it got
the same thing (weight hash and architecture; data id).

How a model can be built again, tried in order:

1. it came from ``load_user_model("package.module:factory", ...)`` or was marked with
   :func:`ship_as` — the factory is called with its keyword arguments;
2. it is a registered orbitscope architecture (it has a ``config`` with an ``"arch"``, e.g. every
   model trained by orbitscope's recipes) — :func:`~orbitscope.models.registry.build_model`;
3. it is a TorchScript module, or a ``torch.export`` graph loaded with ``load_user_model`` from
   an archive — the archive travels as bytes.

Anything else (a model class defined in ``__main__`` or in a function, a graph exported in this
process and never saved) is refused with a :class:`~orbitscope.errors.ModelError` that says how to make it shippable. The
weights always travel with the context, so workers need no shared file system for them.

Data: a dataset made by :func:`~orbitscope.data.parse_data_spec` travels as its spec string (the
worker opens it itself, and keeps the last four it opened for the next runs on the same data;
file paths in a spec must exist on every node, write them absolute for a remote cluster); any other map-style dataset travels by value with the standard pickle (its class
must be importable: not defined in ``__main__`` or in a function). A DataLoader's batches travel
inside the jobs.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import torch
from torch import nn

from ..errors import DataError, ModelError
from .chunk import EvalContext

__all__ = ["ModelRef", "DataRef", "ShippedEval", "Contexts", "Verbatim", "ship_as", "model_ref", "data_ref", "ship",
           "check_plain"]


def ship_as(model: nn.Module, factory: str, **kwargs: Any) -> nn.Module:
    """Mark ``model`` as built by ``factory(**kwargs)`` (``"package.module:function"``), so that
    workers on other machines can build it again (its weights travel separately); returns it."""
    if not isinstance(factory, str) or ":" not in factory:
        raise ValueError(f"factory must look like 'package.module:function', got {factory!r}")
    model.orbitscope_factory = {"factory": factory, "kwargs": dict(kwargs)}
    return model


@dataclass(frozen=True)
class ModelRef:
    """A model by reference: how to build its architecture and its weights.

    Attributes:
        how: ``"factory"`` (``source`` = ``"package.module:function"``, ``kwargs`` its
            arguments), ``"config"`` (``source`` = a registered architecture's config) or
            ``"torchscript"`` / ``"export"`` (``weights`` is the whole archive, ``source`` its
            class or file).
        weights: the state dict as bytes (``torch.save``, read back with ``weights_only=True``),
            or the TorchScript archive.
        model_hash: :func:`~orbitscope.models.reference.model_hash` of the model, checked on
            landing; ``arch``: its ``repr`` (parameter-free layers are invisible to the hash).
    """

    how: str
    source: Any
    weights: bytes = field(repr=False)
    model_hash: str
    arch: str = field(repr=False)
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> nn.Module:
        """The model, rebuilt on CPU in eval mode; a ModelError when it differs from the shipped one."""
        from ..models.loading import resolve_factory
        from ..models.reference import model_hash
        from ..models.registry import build_model

        from ..models.reference import set_eval_mode

        if self.how == "torchscript":
            model = torch.jit.load(io.BytesIO(self.weights), map_location="cpu")
        elif self.how == "export":
            model = torch.export.load(io.BytesIO(self.weights)).module()
        else:
            model = resolve_factory(self.source)(**dict(self.kwargs)) if self.how == "factory" else build_model(dict(self.source))
            state = torch.load(io.BytesIO(self.weights), map_location="cpu", weights_only=True)
            try:
                model.load_state_dict(state, strict=True)
            except RuntimeError as exc:
                raise ModelError(f"the model rebuilt on this worker from {self.how} {self.source!r} differs from the "
                                 "one sent (its weights do not fit): does the factory build the same architecture "
                                 f"every time, in every process? {str(exc).splitlines()[0]}") from exc
        set_eval_mode(model)
        rebuilt_layers = self.how in ("factory", "config")  # an archive's repr names its loader's class
        if model_hash(model) != self.model_hash or rebuilt_layers and repr(model) != self.arch:
            raise ModelError(f"the model rebuilt on this worker from {self.how} {self.source!r} differs from the one "
                             "sent (its weights or layers changed): does the factory build the same architecture "
                             "every time, in every process?")
        return model


def _importable(obj: Any) -> bool:
    cls = type(obj)
    return cls.__module__ != "__main__" and "<locals>" not in cls.__qualname__


def model_ref(model: nn.Module) -> ModelRef:
    """:class:`ModelRef` of ``model`` (see the module docs for how it is built again)."""
    from ..models.reference import model_hash

    inner = getattr(model, "_orig_mod", model)  # torch.compile wraps the model it compiles
    h, arch = model_hash(inner), repr(inner)
    if isinstance(inner, torch.jit.ScriptModule):
        buf = io.BytesIO()
        torch.jit.save(inner, buf)
        return ModelRef("torchscript", type(inner).__name__, buf.getvalue(), h, arch)
    archive = getattr(inner, "orbitscope_archive", None)
    if isinstance(archive, str):  # a torch.export graph loaded from this file: the file travels
        try:
            with open(archive, "rb") as fh:
                return ModelRef("export", archive, fh.read(), h, arch)
        except OSError as exc:
            raise ModelError(f"the torch.export archive {archive!r} this model was loaded from cannot be read "
                             f"again to ship it: {exc}") from exc
    buf = io.BytesIO()
    torch.save(inner.state_dict(), buf)
    origin = getattr(inner, "orbitscope_factory", None)
    if isinstance(origin, dict) and isinstance(origin.get("factory"), str):
        module = origin["factory"].partition(":")[0]
        if module == "__main__":
            raise ModelError(f"model {type(inner).__name__} is built by {origin['factory']!r}, in the script being run; "
                             "workers cannot import it: move the factory into a module they can import")
        return ModelRef("factory", origin["factory"], buf.getvalue(), h, arch, dict(origin.get("kwargs") or {}))
    config = getattr(inner, "config", None)
    if isinstance(config, dict) and "arch" in config:
        from ..models.registry import ARCHITECTURES

        if config["arch"] in ARCHITECTURES:
            return ModelRef("config", dict(config), buf.getvalue(), h, arch)
    raise ModelError(
        f"model {type(inner).__name__} cannot be shipped to workers: orbitscope sends a model as the function that "
        "builds it plus its weights, never as a pickle. Load it with "
        "orbitscope.models.load_user_model('package.module:factory', weights=...), or mark it with "
        "orbitscope.ship_as(model, 'package.module:factory', **kwargs) naming an importable function that builds "
        "the same architecture"
    )


#: datasets opened from their spec in this (worker) process, oldest first
_OPENED: dict[str, Any] = {}
_KEEP_OPENED = 4


@dataclass(frozen=True)
class DataRef:
    """A map-style dataset by reference: its data spec (``how="spec"``) or its pickle (``"value"``)."""

    how: str
    payload: Any = field(repr=False)
    data_id: str | None = None

    def open(self) -> Any:
        """The dataset (re-opened from its spec, or unpickled); a DataError if it is not the one sent."""
        if self.how == "spec":
            from ..data.specs import parse_data_spec

            ds = _OPENED.pop(self.payload, None) or parse_data_spec(self.payload)
            _OPENED[self.payload] = ds  # the newest few stay open for the next run on the same data
            while len(_OPENED) > _KEEP_OPENED:
                _OPENED.pop(next(iter(_OPENED)))
        else:
            ds = pickle.loads(self.payload)
        got = getattr(ds, "data_id", None)
        if self.data_id is not None and got is not None and got != self.data_id:
            raise DataError(f"the data re-opened on this worker from {self.payload!r} is {got!r}, not {self.data_id!r} "
                            "as on the driver: do the files behind the spec differ between machines?")
        return ds


def data_ref(dataset: Any) -> DataRef:
    """:class:`DataRef` of a map-style dataset (see the module docs)."""
    spec = getattr(dataset, "data_spec", None)
    data_id = getattr(dataset, "data_id", None)
    if isinstance(spec, str):
        return DataRef("spec", spec, data_id)
    if not _importable(dataset):
        raise DataError(f"dataset {type(dataset).__name__} cannot be shipped to workers: its class is defined in the "
                        "script being run or inside a function; define it in an importable module, or open the data "
                        "with a data spec (orbitscope.data.parse_data_spec)")
    try:
        payload = pickle.dumps(dataset, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise DataError(f"dataset {type(dataset).__name__} cannot be shipped to workers ({exc}); open it with a data "
                        "spec (orbitscope.data.parse_data_spec) or give it as arrays") from exc
    return DataRef("value", payload, data_id)


@dataclass
class ShippedEval:
    """An :class:`~orbitscope.engine.chunk.EvalContext` with its model and data by reference:
    ``context`` has neither a model call nor a data source; ``call`` holds the model call's
    options and ``source`` the data source's (chunk size, data id, collate)."""

    context: EvalContext
    model: ModelRef
    optimize: bool
    call: dict[str, Any]
    data: DataRef | None
    source: tuple[int, str, Any] | None
    is_shipped = True  # a class attribute: ready to travel (ship() returns it as it is)

    def landed(self, device: torch.device | str | None = None) -> EvalContext:
        """The context rebuilt on this worker (on ``device``; default: the driver's device)."""
        from .model_call import ModelCall, Normalizer
        from .optimization import rewrite_model
        from .source import DataSource

        ctx = self.context
        dev = torch.device(device) if device is not None else ctx.device
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ModelError("this evaluation runs on cuda but this worker has no GPU: give the executor "
                             "num_gpus=1 (Ray schedules the jobs on GPU nodes), or evaluate on cpu")
        net = self.model.build()
        if self.optimize:  # the rewrites the driver proved on the first batch
            net, _ = rewrite_model(net)
        opts = dict(self.call)
        norm = opts.pop("normalize")
        if norm.spec is not None and dev != ctx.device:
            norm = Normalizer((norm.spec[0], norm.spec[1]), dev, norm.channel_axis)
        source = None
        if self.data is not None and self.source is not None:
            chunk_size, data_id, collate = self.source
            source = DataSource(self.data.open(), chunk_size, data_id, collate=collate)
        return replace(ctx, call=ModelCall(net.to(dev), normalize=norm, **opts), source=source, device=dev)


class Verbatim:
    """A context that travels as it is (it holds no model or dataset that needs a reference)."""

    is_shipped = True

    def __init__(self, value: Any) -> None:
        self.value = value

    def landed(self, device: torch.device | str | None = None) -> Any:
        return self.value


class Contexts(dict):
    """Several contexts by key, for jobs ``(key, job)`` of several runs in one executor map
    (:func:`keyed`); shipped item by item, and landed lazily on a worker (a worker builds only
    the models of the runs whose chunks it gets)."""

    def landed(self, device: torch.device | str | None = None) -> "Contexts":
        return _LazyContexts({k: v for k, v in self.items()}, device)


class _LazyContexts(Contexts):
    is_shipped = True

    def __init__(self, shipped: dict[Any, Any], device: Any) -> None:
        super().__init__()
        self.shipped, self.device = shipped, device

    def __missing__(self, key: Any) -> Any:
        value = self.shipped[key].landed(self.device)
        self[key] = value
        return value


def ship(context: Any) -> Any:
    """``context`` ready to travel: an object whose ``landed(device)`` rebuilds it on a worker
    (a context shipped already is returned as it is)."""
    if getattr(context, "is_shipped", False):
        return context
    if isinstance(context, EvalContext):
        if context.model is None:
            raise ModelError("this evaluation context names no model to ship (EvalContext.model)")
        src, data, source = context.source, None, None
        if src is not None and src.random_access:
            data, source = data_ref(src.dataset), (src.chunk_size, src.data_id, src.collate)
        call = context.call
        options = dict(read=call.read, concat=call.concat, normalize=call.norm, channels_last=call.channels_last,
                       forward_batch=call.forward_batch, what=call.what, precision=call.precision)
        bare = replace(context, call=None, source=None, model=None)
        check_plain((bare, options))
        return ShippedEval(bare, model_ref(context.model), context.optimize, options, data, source)
    if isinstance(context, Contexts):
        return Contexts({k: ship(v) for k, v in context.items()})
    shipper = getattr(context, "shipped", None)
    if callable(shipper):
        return shipper()
    check_plain(context)
    return Verbatim(context)


def check_plain(value: Any) -> None:
    """Refuse a value the standard pickle cannot send by reference (lambdas, local or ``__main__``
    classes, models): workers could not rebuild it."""
    if isinstance(value, nn.Module):
        raise ModelError("a model cannot travel as a plain value; ship it with orbitscope.engine.shipping.model_ref")
    try:
        pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise DataError(f"this job context cannot be sent to workers ({exc}): give it module-level functions and "
                        "importable classes only") from exc

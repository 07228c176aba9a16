"""ONNX models through ONNX Runtime, as torch modules the engine runs like any other.

:class:`OnnxModel` wraps an ``.onnx`` file in an :class:`~torch.nn.Module` whose forward converts
its tensors to NumPy, runs an ONNX Runtime session and returns torch tensors on the input's
device: one tensor when the graph has one output (or one is selected), else a tuple in the
graph's output order. Any task whose model output is a tensor or a tuple of tensors works with it
(classification logits, flow fields, point-cloud logits; detection needs a wrapper that turns the
graph's raw outputs into torchvision-style detections).

Conventions:

* Inputs map to the graph's inputs in order; each is cast to the dtype the graph declares
  (float32, float16, float64, uint8, int64, ...), made C-contiguous and moved to the CPU.
* A graph whose batch dimension is fixed (e.g. exported at batch 1) runs each batch in slices of
  that size; a symbolic batch dimension (``dynamic_axes``) runs the whole batch at once.
* Providers: ONNX Runtime's CUDA provider where it is installed and a CUDA device is there, its
  CPU provider otherwise (``providers=`` chooses). Sessions use the intra-op thread count of
  torch in the calling process (``torch.get_num_threads()``).
* Identity: the file's bytes are the module's one buffer (``onnx_bytes``, uint8), so
  :func:`~orbitscope.models.reference.model_hash` and the run id change exactly when the graph or
  its weights do. Workers (process, Ray) rebuild the model from the same path: the file must
  exist on every node.
* Inference optimisation (BatchNorm folding, channels_last, reduced precision, compile) does not
  apply: the graph runs outside torch, and ONNX Runtime optimises it itself. The engine runs the
  model as given and records that reason.

Needs PyPI ``onnxruntime`` (``pip install 'orbitscope[onnx]'``), imported when a model is built.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import ModelError, SpecError

__all__ = ["OnnxModel", "load_onnx_model", "OUTSIDE_TORCH_REASON"]

#: why the engine's inference optimisation does not apply to an :class:`OnnxModel`
OUTSIDE_TORCH_REASON = ("an ONNX Runtime model: its graph runs outside torch, so there is nothing for torch to "
                        "rewrite (ONNX Runtime optimises the graph itself)")

# ONNX tensor element types as ONNX Runtime names them -> NumPy dtypes
_NUMPY_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise SpecError("ONNX models need PyPI onnxruntime: pip install 'orbitscope[onnx]' "
                        "(or pip install onnxruntime)") from exc
    return onnxruntime


def default_providers() -> list[str]:
    """ONNX Runtime's CUDA provider first where it is installed and a CUDA device is there, then
    its CPU provider."""
    available = _onnxruntime().get_available_providers()
    wanted = (["CUDAExecutionProvider"] if torch.cuda.is_available() else []) + ["CPUExecutionProvider"]
    return [p for p in wanted if p in available] or ["CPUExecutionProvider"]


class OnnxModel(nn.Module):
    """An ONNX graph run by ONNX Runtime, called like a torch model (see the module docs).

    Its ``optimization_refused`` says why the engine's inference optimisation does not apply.

    Args:
        path: the ``.onnx`` file.
        outputs: names of the graph outputs to return, in this order (default: all of them);
            one name returns a tensor, several a tuple.
        providers: ONNX Runtime execution providers (default :func:`default_providers`).
        graph: the file's bytes, when they are at hand already (``path`` then only names them).

    Raises:
        FileNotFoundError: no such file.
        ModelError: ONNX Runtime cannot read the file, or ``outputs`` names an output the graph
            does not have.
        SpecError: onnxruntime is not installed.
    """

    optimization_refused = OUTSIDE_TORCH_REASON

    def __init__(self, path: str | os.PathLike[str], outputs: Sequence[str] | None = None,
                 providers: Sequence[str] | None = None, *, graph: bytes | None = None) -> None:
        super().__init__()
        p = Path(path)
        if graph is None and not p.is_file():
            raise FileNotFoundError(f"ONNX model not found: '{path}'")
        self.path = str(p.resolve())
        data = p.read_bytes() if graph is None else graph
        self.register_buffer("onnx_bytes", torch.frombuffer(bytearray(data), dtype=torch.uint8), persistent=True)
        ort = _onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.log_severity_level = 3  # errors only
        self.requested_providers = list(providers) if providers is not None else None  # None: this machine's
        self.providers = self.requested_providers or default_providers()
        try:
            self.session = ort.InferenceSession(data, sess_options=options, providers=self.providers)
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise ModelError(f"ONNX Runtime cannot load '{path}': {exc}") from exc
        self.input_meta = self.session.get_inputs()
        names = [o.name for o in self.session.get_outputs()]
        missing = [n for n in outputs or () if n not in names]
        if missing:
            raise ModelError(f"'{path}' has no output(s) {missing}; its outputs are {names}")
        self.output_names = list(outputs) if outputs else names
        batch = self.input_meta[0].shape[0] if self.input_meta[0].shape else None
        #: rows the graph takes at once (None: any number)
        self.fixed_batch = batch if isinstance(batch, int) and batch > 0 else None
        self.requested_outputs = list(outputs) if outputs else None
        self.orbitscope_factory = {"factory": "orbitscope.models.onnx_model:load_onnx_model",
                                   "kwargs": {"path": self.path, "outputs": self.requested_outputs}}
        self.eval()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (a process pool, a deep copy) as its graph's bytes: a session cannot be pickled,
        a new one is made from the same bytes."""
        return (_from_graph, (self.path, self.requested_outputs, self.requested_providers,
                              self.onnx_bytes.cpu().numpy().tobytes()))

    def extra_repr(self) -> str:
        return f"path={self.path!r}, outputs={self.output_names}, providers={self.providers}"

    def _feed(self, inputs: Sequence[Tensor], lo: int, hi: int) -> dict[str, np.ndarray]:
        """The graph's inputs for rows ``lo:hi``, padded with copies of the last row up to a fixed
        batch size."""
        feed = {}
        for meta, x in zip(self.input_meta, inputs):
            dtype = _NUMPY_TYPES.get(meta.type)
            if dtype is None:
                raise ModelError(f"'{self.path}': input {meta.name!r} has type {meta.type}, which orbitscope "
                                 "cannot feed; supported: " + ", ".join(sorted(_NUMPY_TYPES)))
            rows = x[lo:hi].detach().to("cpu")
            if self.fixed_batch and len(rows) < self.fixed_batch:
                rows = torch.cat([rows, rows[-1:].expand(self.fixed_batch - len(rows), *rows.shape[1:])])
            feed[meta.name] = np.ascontiguousarray(rows.numpy().astype(dtype, copy=False))
        return feed

    def forward(self, *inputs: Tensor) -> Tensor | tuple[Tensor, ...]:
        if len(inputs) != len(self.input_meta):
            raise ModelError(f"'{self.path}' takes {len(self.input_meta)} input(s) "
                             f"({[m.name for m in self.input_meta]}), got {len(inputs)}")
        n = inputs[0].shape[0]
        step = self.fixed_batch or max(n, 1)
        parts = []
        for lo in range(0, n, step):
            got = self.session.run(self.output_names, self._feed(inputs, lo, lo + step))
            parts.append([out[:min(step, n - lo)] for out in got])  # padding rows dropped
        device = inputs[0].device
        outs = tuple(torch.from_numpy(np.concatenate([p[k] for p in parts])).to(device)
                     for k in range(len(self.output_names)))
        return outs[0] if len(outs) == 1 else outs

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        got = state_dict.get(prefix + "onnx_bytes")
        if got is not None and not torch.equal(got.to(self.onnx_bytes.device), self.onnx_bytes):
            raise ModelError(f"the ONNX graph sent differs from '{self.path}' on this machine: an OnnxModel's "
                             "weights are its file, so every node needs the same file at the same path")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _from_graph(path: str, outputs: list[str] | None, providers: list[str] | None, graph: bytes) -> OnnxModel:
    return OnnxModel(path, outputs, providers, graph=graph)


def load_onnx_model(path: str | os.PathLike[str], outputs: Sequence[str] | None = None) -> OnnxModel:
    """:class:`OnnxModel` of ``path`` with the default providers (the factory that workers call)."""
    return OnnxModel(path, outputs=outputs)

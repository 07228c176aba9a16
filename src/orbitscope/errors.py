"""One exception hierarchy for orbitscope.

Every error orbitscope raises on purpose derives from :class:`OrbitscopeError`, and each family
also derives from the builtin a caller would expect, so existing ``except ValueError`` code keeps
working:

==================  ==========================  =============================================
class               also a                      raised when
==================  ==========================  =============================================
DataError           ValueError                  data cannot be evaluated as given
ModelError          RuntimeError                a model fails or returns unusable values
StateDictMismatch…  ModelError                  weights do not fit the architecture
StoreError          RuntimeError                a store is missing, corrupt or inconsistent
DamagedRunError     StoreError                  a stored chunk is missing or fails its checksum
SpecError           ValueError                  a spec string/dict (orbit, data, perturbation,
                                                task, model) cannot be parsed or is invalid
NotFoundError       KeyError                    a named thing (run, variable, sample, metric,
                                                registry entry) does not exist
JobError            RuntimeError                a job failed on a distributed executor's worker
                                                (the worker's error is its ``cause``)
NotFittedError      RuntimeError                an estimator (an ML4ML assessor) is used before
                                                ``fit`` (:func:`check_is_fitted`)
==================  ==========================  =============================================

Defined beside the code that raises them, in the same hierarchy: ``RunBusyError`` (a
:class:`StoreError`, :mod:`orbitscope.results.store`), ``UntrustedFileError`` (a
:class:`SpecError`, :mod:`orbitscope.trust`), and the interface's ``AppError`` and
``LabellingError`` (both ``OrbitscopeError`` and ``ValueError``, :mod:`orbitscope.app`).

The command line reports these (and missing files or user modules) as one-line errors; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "OrbitscopeError",
    "DataError",
    "ModelError",
    "StateDictMismatchError",
    "StoreError",
    "DamagedRunError",
    "SpecError",
    "NotFoundError",
    "JobError",
    "NotFittedError",
    "check_is_fitted",
]


class OrbitscopeError(Exception):
    """Base of every error orbitscope raises on purpose."""


class DataError(OrbitscopeError, ValueError):
    """The data cannot be evaluated as given (shape, dtype, range, structure)."""


class ModelError(OrbitscopeError, RuntimeError):
    """The model failed on, or returned unusable values for, the transformed inputs."""


class StateDictMismatchError(ModelError):
    """Weights do not fit the model: lists missing/unexpected keys and shape mismatches."""

    def __init__(self, message: str, missing: list[str], unexpected: list[str]) -> None:
        super().__init__(message)
        self.missing = missing
        self.unexpected = unexpected


class StoreError(OrbitscopeError, RuntimeError):
    """A store is missing, corrupt, or inconsistent with what is asked of it."""


class DamagedRunError(StoreError):
    """A stored run's chunk is missing or does not match its checksum (evaluating the same run
    again recomputes the damaged chunks)."""


class SpecError(OrbitscopeError, ValueError):
    """A specification (orbit, data, perturbation, task, model, option) is malformed or invalid."""


class NotFoundError(OrbitscopeError, KeyError):
    """A named thing (run, variable, sample, metric, registry entry) does not exist.

    ``str()`` gives the message itself (a plain ``KeyError`` would quote it).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class JobError(OrbitscopeError, RuntimeError):
    """A job failed on a worker of a distributed executor (Ray). ``job`` is the job, ``cause``
    the worker's exception (also ``__cause__``), ``where`` where it ran."""

    def __init__(self, message: str, job: object = None, cause: BaseException | None = None, where: str = "") -> None:
        super().__init__(message)
        self.job, self.cause, self.where = job, cause, where


class NotFittedError(OrbitscopeError, RuntimeError):
    """An estimator was used before ``fit`` (scikit-learn's ``check_is_fitted`` idea); still a
    ``RuntimeError``, as the assessors raised before."""


def check_is_fitted(obj: object, attributes: str | Sequence[str], *, fit_call: str = "fit(X, y)") -> None:
    """Raise :class:`NotFittedError` unless ``obj`` has every attribute that ``fit`` sets.

    Args:
        obj: the estimator.
        attributes: one attribute name or several (e.g. ``"threshold_"``), all set by ``fit``.
        fit_call: how to fit it, shown in the message (e.g. ``"fit(correctness, y)"``).

    Raises:
        NotFittedError: an attribute is missing; the message names the class and the call to make.
    """
    names = [attributes] if isinstance(attributes, str) else list(attributes)
    if not all(hasattr(obj, name) for name in names):
        raise NotFittedError(f"{type(obj).__name__} is not fitted; call {fit_call} first")

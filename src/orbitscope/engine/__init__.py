"""The evaluation engine: plan chunk jobs, evaluate them, write each chunk once."""

from .activations import ActivationProbe
from .evaluation import DataError, ModelError, Run, evaluate

__all__ = ["evaluate", "Run", "ModelError", "DataError", "ActivationProbe"]

"""Tasks: how a model's output is read and scored against the group-moved target.

A new task is a new module with a :class:`Task` subclass decorated with :func:`register_task`.
"""

from .base import TASKS, Task, concat_outputs, list_tasks, register_task, split_item, task_from_spec
from .classification import Classification, class_mean_accuracy, to_probabilities
from .detection import Detection
from .flow import Flow
from .pointcloud import PointCloudClassification, minmax_over_classes, minmax_over_orbit, orbit_minmax
from .variables import ENGINE_VARIABLES, VARIABLE_KINDS, Variable, VariableKind, variable_meta

__all__ = ["Task", "TASKS", "register_task", "list_tasks", "task_from_spec", "split_item", "concat_outputs",
           "Classification", "Detection", "Flow", "PointCloudClassification", "minmax_over_classes",
           "minmax_over_orbit", "orbit_minmax", "to_probabilities", "class_mean_accuracy", "Variable", "VariableKind", "VARIABLE_KINDS",
           "ENGINE_VARIABLES", "variable_meta"]

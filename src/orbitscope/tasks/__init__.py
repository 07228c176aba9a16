"""Tasks: how a model's output is read and scored against the group-moved target."""

from .base import Classification, Task, Variable, task_from_spec

__all__ = ["Task", "Variable", "Classification", "task_from_spec"]

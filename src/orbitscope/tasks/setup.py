"""Tasks as the command line and sweep files name them: a task kind plus its options -> the task,
the dataset it runs on, and the field of view."""

from __future__ import annotations

from typing import Any

__all__ = ["task_and_data", "TASK_KINDS"]

#: The task kinds :func:`task_and_data` builds.
TASK_KINDS = ("classification", "detection", "flow", "pointcloud")


def task_and_data(kind: str, dataset: Any, orbit: Any, view_size: int | None = None, key_objects: bool = True,
                  score_threshold: float = 0.5, probabilities: bool = False, margin: int | None = None,
                  max_objects: int | None = None) -> tuple[Any, Any, tuple[int, int] | None]:
    """The task named ``kind`` (``classification``, ``detection``, ``flow``, ``pointcloud``; the
    CLI's ``--task``), the dataset it runs on (key-object contexts for a detection window orbit)
    and the view size. The other arguments are the CLI options of the same names (``--view-size``,
    ``--key-objects``, ``--score-threshold``, ``--probabilities``, ``--margin``,
    ``--max-objects``); errors name those options."""
    import numpy as np

    from ..data.coco import DetectionSet, key_object_contexts
    from ..tasks import Classification, Detection, Flow, PointCloudClassification

    if kind == "pointcloud":
        if view_size is not None:
            raise ValueError("--view-size is for --task detection (a field of view moving over context images)")
        return PointCloudClassification(store_probabilities=probabilities), dataset, None
    if kind == "flow":
        if view_size is not None or probabilities:
            raise ValueError("--view-size and --probabilities are not for --task flow (image pairs -> flow fields)")
        return Flow(), dataset, None
    if kind == "classification":
        if view_size is not None:
            raise ValueError("--view-size is for --task detection (a field of view moving over context images)")
        return Classification(store_probabilities=probabilities), dataset, None
    if kind != "detection":
        raise ValueError(f"--task {kind!r}: choose classification, detection, flow or pointcloud")
    if probabilities:
        raise ValueError("--probabilities is for classification; detection stores its top boxes, scores and classes")
    if max_objects is None:  # enough for the most crowded image
        counts = [len(it.boxes) for it in dataset.items] if isinstance(dataset, DetectionSet) else []
        max_objects = max([16, *counts])
    if view_size is None:
        return Detection(score_threshold=score_threshold, max_objects=max_objects, input_kind="image"), dataset, None
    if view_size < 1:
        raise ValueError(f"--view-size must be a positive number of pixels, got {view_size}")
    if key_objects:
        if not isinstance(dataset, DetectionSet):
            raise ValueError("--key-objects needs a detection dataset (e.g. coco:ANN.json:IMAGES); use --whole-images "
                             "for other data")
        if margin is None:
            other = [d for d in orbit.dims if d not in ("tx", "ty")]
            if other:
                raise ValueError(f"--key-objects sizes contexts from the orbit's shifts, but this orbit also moves the "
                                 f"view by {', '.join(other)}: give --margin PIXELS (context around the view on each "
                                 "side, enough for the view's moved corners)")
            shifts = [np.abs(np.asarray(orbit.coords[d], dtype=float)).max() for d in orbit.dims]
            margin = int(np.ceil(max(shifts))) if shifts else 0
        if margin < 0:
            raise ValueError(f"--margin must be at least 0 pixels, got {margin}")
        dataset = key_object_contexts(dataset, view=view_size, max_shift=margin)
    return Detection(score_threshold=score_threshold, max_objects=max_objects), dataset, (view_size, view_size)

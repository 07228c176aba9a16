"""torchvision's detection architectures as orbitscope detectors (randomly initialised).

:func:`torchvision_detector` builds one of :data:`TORCHVISION_DETECTORS` with ``weights=None`` and
``weights_backbone=None`` (nothing is downloaded), its parameters drawn deterministically from a
seed, in eval mode, with its internal resize set to the field of view so that the detector sees
the view's pixels as they are. The module takes a batch of images (B, 3, H, W) in [0, 1] (a
tensor or a list of (3, H, W) tensors; torchvision normalises them itself) and returns
torchvision-style ``list[dict(boxes (n, 4) xyxy pixels of the input, scores (n,), labels (n,))]``,
which :class:`orbitscope.tasks.Detection` reads as it is.

Label convention (torchvision's): ``num_classes`` counts the background, label 0; object classes
are 1 … ``num_classes`` − 1, so give ground-truth labels in that range. Faster R-CNN and SSDlite
drop the background column and never return label 0. FCOS and RetinaNet score each of the
``num_classes`` slots with its own sigmoid, slot 0 included: trained on labels ≥ 1, slot 0 is never
a positive and its scores fall towards 0, but an *untrained* FCOS or RetinaNet does return label-0
boxes. They are passed on unchanged (for :class:`~orbitscope.tasks.Detection` such a box has the
wrong class in precision, recall and AP; ``confidence`` and ``iou`` ignore classes).

The models are registered for :func:`orbitscope.models.build_model` as ``"torchvision:<arch>"``
(``build_model({"arch": "torchvision:fcos_resnet50_fpn", "num_classes": 11, "image_size": 128})``),
and each built model carries that config as ``model.config``, so ``save_model`` / ``load_model``
round-trip it. (This name is the registry's; the command line's ``module:factory`` model specs are
a different namespace.)

Random-init models are for adapter tests and timing, not for accuracy: train them, or load trained
weights into them (``load_state_dict``), before reading anything into their metrics. Untrained,
they are degenerate in ways worth knowing: SSDlite's features vanish through its randomly
initialised backbone (about 1e-13 at the head), so its outputs do not depend on the input (every
score 1 / ``num_classes``, boxes = its default boxes); Faster R-CNN's box-head features are nearly
the same for every proposal, so a dozen detections tie for the top score and which comes first is
torchvision's tie order (and its lower-ranked detections can change with the batch size, through
last-bit differences in near-tied NMS); FCOS's and RetinaNet's scores do vary with the input.

torchvision is optional: it is imported only when a model is built (``pip install torch==2.14.1
torchvision==0.29.1`` from the local package mirror; the two must match).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from ..errors import SpecError
from .registry import register_model

__all__ = ["TORCHVISION_DETECTORS", "torchvision_detector"]

#: The torchvision detection architectures :func:`torchvision_detector` builds.
TORCHVISION_DETECTORS: tuple[str, ...] = (
    "fasterrcnn_mobilenet_v3_large_fpn",
    "fcos_resnet50_fpn",
    "retinanet_resnet50_fpn",
    "ssdlite320_mobilenet_v3_large",
)

INSTALL_HINT = ("torchvision is not installed; install the matching pair from the local package mirror: "
                "pip install torch==2.14.1 torchvision==0.29.1")


def torchvision_detector(arch: str, num_classes: int = 11, *, image_size: int = 128, score_threshold: float = 0.0,
                         detections: int = 100, seed: int = 0) -> nn.Module:
    """A randomly initialised torchvision detector, in eval mode (see the module docstring).

    Args:
        arch: one of :data:`TORCHVISION_DETECTORS`.
        num_classes: torchvision's count, *including* the background (label 0): object classes
            are 1 … ``num_classes`` − 1 (an untrained FCOS or RetinaNet may also emit label 0; see
            the module docstring).
        image_size: the side of the (square) field of view the model will see. The internal
            resize is set to it, so a view of that size is not resampled: ``min_size = max_size =
            image_size`` for Faster R-CNN, FCOS and RetinaNet (their transform scales the shorter
            side to ``min_size`` unless the longer would exceed ``max_size``); for SSDlite, whose
            builder fixes its input at 320 × 320 and ignores a ``size`` argument, the transform's
            fixed size is set to ``image_size`` × ``image_size`` after construction (its default
            boxes are relative to the input, and its head is convolutional, so it runs at any
            size; inputs of another size are resized to it).
        score_threshold: detections scoring at most this are dropped inside the model (torchvision
            keeps scores strictly above it): ``box_score_thresh`` for Faster R-CNN (its region
            proposal network keeps torchvision's own ``rpn_score_thresh`` = 0.05),
            ``score_thresh`` for the others. 0 keeps every candidate, so that even a random model
            returns boxes.
        detections: most detections per image (``box_detections_per_img`` for Faster R-CNN,
            ``detections_per_img`` for the others).
        seed: parameters are drawn after ``torch.manual_seed(seed)`` inside
            ``torch.random.fork_rng``, so the same seed gives the same model and the caller's RNG
            state is left as it was.

    Raises:
        ValueError: an unknown ``arch`` (the message lists the choices) or an invalid argument.
        SpecError: torchvision is not installed (the message says how to install it).
    """
    if arch not in TORCHVISION_DETECTORS:
        raise ValueError(f"unknown torchvision detector {arch!r}; choose one of: {', '.join(TORCHVISION_DETECTORS)}")
    if int(num_classes) < 2:
        raise ValueError(f"num_classes counts the background too and must be at least 2, got {num_classes!r}")
    if int(image_size) < 1:
        raise ValueError(f"image_size must be a positive number of pixels, got {image_size!r}")
    if not 0.0 <= float(score_threshold) <= 1.0:
        raise ValueError(f"score_threshold must be in [0, 1], got {score_threshold!r}")
    if int(detections) < 1:
        raise ValueError(f"detections must be at least 1, got {detections!r}")
    try:
        from torchvision.models import detection as tv_detection
    except ImportError as exc:
        raise SpecError(INSTALL_HINT) from exc

    size, thresh, keep = int(image_size), float(score_threshold), int(detections)
    kwargs: dict[str, Any]
    if arch.startswith("fasterrcnn"):
        kwargs = {"min_size": size, "max_size": size, "box_score_thresh": thresh, "box_detections_per_img": keep}
    elif arch.startswith("ssdlite"):
        kwargs = {"score_thresh": thresh, "detections_per_img": keep}
    else:
        kwargs = {"min_size": size, "max_size": size, "score_thresh": thresh, "detections_per_img": keep}
    build = getattr(tv_detection, arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = build(weights=None, weights_backbone=None, num_classes=int(num_classes), **kwargs)
    if arch.startswith("ssdlite"):
        model.transform.min_size = (size,)
        model.transform.max_size = size
        model.transform.fixed_size = (size, size)
    model.config = {"arch": f"torchvision:{arch}", "num_classes": int(num_classes), "image_size": size,
                    "score_threshold": thresh, "detections": keep, "seed": int(seed)}
    return model.eval()


for _arch in TORCHVISION_DETECTORS:
    register_model(f"torchvision:{_arch}", functools.partial(torchvision_detector, _arch))
del _arch

"""Perturbation samplers: random x' around an input x, batched on the device and seeded.

Every sampler maps a batch ``x`` (B, C, H, W) with values in [0, 1] to one random perturbation
per row, ``x'`` (B, C, H, W) in [0, 1], drawing all randomness from the ``torch.Generator`` it is
given (on ``x``'s device), so a seed fixes the samples. To draw n perturbations of one input,
repeat it n times (``x.expand(n, -1, -1, -1)``); :func:`orbitscope.robust.certify` does that.

Families (CLI spelling in brackets; numbers may be fractions such as ``8/255``):

* :class:`LinfUniform` (``linf:EPS`` or ``linf:EPS:8bit``): uniform in the L∞ box clipped to the
  valid range, ``x' ~ U[clamp(x − ε, 0, 1), clamp(x + ε, 0, 1)]`` independently per value; with
  ``quantize=True`` then ``floor(255 x') / 255``, the setting of Mu & Lim (arXiv 2404.16457).
* :class:`L2Uniform` (``l2:EPS``): uniform in the L2 ball of radius ε (exact: a Gaussian direction
  normalised to unit length times the radius ``ε U^{1/d}``, d = C·H·W), then clipped to [0, 1].
  Clipping moves mass onto the faces of the cube, so x' is uniform in the ball only where the
  ball lies inside [0, 1]^d.
* :class:`GaussianNoise` (``gaussian:SIGMA``): ``x + N(0, σ²)`` per value, clipped to [0, 1].
* Semantic, random group elements applied with :func:`orbitscope.kinds.warp_images`
  (``layout="paired"``, bilinear, zero padding by default):
  :class:`RandomRotation` (``rotation:THETA``, angle ~ U[−θ, θ] degrees, CCW as displayed),
  :class:`RandomShift` (``shift:S`` integer pixels uniform in {−S, …, S} per axis, or
  ``shift:S:continuous`` for U[−S, S]; +x right, +y down), :class:`RandomScale`
  (``scale:LO:HI``, factor ~ U[LO, HI] about the centre) and :class:`RandomBrightness`
  (``brightness:LO:HI``, gain ~ U[LO, HI], values clipped to [0, 1]).
* :class:`ProductSampler` (``rotation:15+scale:0.9:1.1``, factors joined by ``+``): one random
  element of every semantic factor, composed (the first factor acts last, as
  :meth:`Transforms.compose`) and applied in one warp; then the pixel-noise factors in order.

``sampler.spec()`` is a JSON-able dict (:func:`sampler_from_spec` rebuilds the sampler) and
``str(sampler)`` the CLI string that :func:`parse_perturbation` reads back.

Your own sampler: subclass :class:`PixelSampler` or :class:`SemanticSampler`, give it a ``kind``
and its CLI syntax (``cli_numbers`` numbers after the name, optional word ``cli_flags``, and
:meth:`~PerturbationSampler.from_cli` if the constructor does not take the numbers in order), and
register it with :func:`register_perturbation` (or ``PERTURBATIONS.register(kind, cls)``); then
``parse_perturbation("mykind:0.1")``, ``sampler_from_spec`` and products with ``+`` accept it.

Malformed specs raise :class:`~orbitscope.errors.SpecError` (a ``ValueError``): unknown names, a
wrong count of numbers, empty factors (``linf:0.03+``), non-finite or out-of-range values.

Layout: :mod:`.sampler_base` (the interface and its parameter checks), :mod:`.pixel_samplers`,
:mod:`.semantic_samplers`, :mod:`.product_sampler` and :mod:`.perturbation_specs` (the registry and the
CLI parsing); this module re-exports their public names.
"""

from .perturbation_specs import (
    PERTURBATIONS,
    list_perturbations,
    parse_perturbation,
    register_perturbation,
    sampler_from_spec,
)
from .pixel_samplers import GaussianNoise, L2Uniform, LinfUniform, PixelSampler
from .product_sampler import ProductSampler
from .sampler_base import PerturbationSampler
from .semantic_samplers import RandomBrightness, RandomRotation, RandomScale, RandomShift, SemanticSampler

__all__ = [
    "PerturbationSampler",
    "PixelSampler",
    "SemanticSampler",
    "LinfUniform",
    "L2Uniform",
    "GaussianNoise",
    "RandomRotation",
    "RandomShift",
    "RandomScale",
    "RandomBrightness",
    "ProductSampler",
    "PERTURBATIONS",
    "register_perturbation",
    "parse_perturbation",
    "sampler_from_spec",
    "list_perturbations",
]


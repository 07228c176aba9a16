"""The Lie derivative of a model (Gruver et al., ICLR 2023): where and how much equivariance breaks,
along a one-parameter subgroup, end to end and layer by layer.

* :mod:`~orbitscope.lie.generators`: the one-parameter subgroups (rotation, translate_x/y, scale,
  shear, brightness, contrast, so3_x/y/z) and their units;
* :mod:`~orbitscope.lie.derivative`: ``L_X f`` of one batch, by forward-mode differentiation
  through the model and the symmetric difference of the data kinds' own actions, with the exact
  per-layer decomposition;
* :mod:`~orbitscope.lie.run`: :func:`lie_derivative`, the LEE of a model over a dataset, stored
  as a run (dims ``sample × generator``, and ``layer``).
"""

from .derivative import STEP_PIXELS, LieTerms, default_step, lie_terms, output_vector, tangent
from .run import LEE_VARIABLES, default_generators, is_lee_run, lie_derivative
from .generators import GENERATORS, PLANAR, SPATIAL, Generator, get_generator, list_generators, register_generator

__all__ = ["lie_derivative", "is_lee_run", "default_generators", "LEE_VARIABLES", "STEP_PIXELS", "LieTerms", "default_step", "lie_terms", "output_vector", "tangent", "GENERATORS", "PLANAR",
           "SPATIAL", "Generator", "get_generator", "list_generators", "register_generator"]

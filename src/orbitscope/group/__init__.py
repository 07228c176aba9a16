"""Groups: elements (the :class:`Transforms` algebra) and orbits (finite, named group samples)."""

from .elements import Transforms, check_closed, element_features, quaternion_to_matrix, rotation_matrix, unique_elements
from .grids import MAX_ORBIT_SIZE
from .orbits import (
    ORBITS,
    Brightness,
    Contrast,
    Orbit,
    Product,
    Rotation,
    Rotation3D,
    Rotation90,
    Scale,
    Translation,
    list_orbits,
    orbit_from_spec,
    register_orbit,
)
from .parse import parse_orbit
from .finite import D4, NERO_MOSAIC, Flip, TimeReversal, d4_time_reversal
from .so3 import NeroSO3, Octahedral, RandomSO3, SO3Grid, random_quaternions, shoemake_quaternions, super_fibonacci

__all__ = ["Transforms", "rotation_matrix", "quaternion_to_matrix", "element_features", "unique_elements",
           "check_closed", "Orbit", "Rotation", "Rotation90", "Translation", "Scale", "Brightness", "Contrast",
           "Rotation3D", "Product", "Flip", "D4", "TimeReversal", "d4_time_reversal", "NERO_MOSAIC",
           "NeroSO3", "SO3Grid", "RandomSO3", "Octahedral", "super_fibonacci", "random_quaternions", "shoemake_quaternions", "ORBITS", "MAX_ORBIT_SIZE", "register_orbit",
           "parse_orbit", "orbit_from_spec", "list_orbits"]

"""Groups: elements (the :class:`Transforms` algebra) and orbits (finite, named group samples)."""

from .elements import Transforms, check_closed, element_features, quaternion_to_matrix, rotation_matrix, unique_elements
from .orbits import (
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
    parse_orbit,
)

__all__ = ["Transforms", "rotation_matrix", "quaternion_to_matrix", "element_features", "unique_elements",
           "check_closed", "Orbit", "Rotation", "Rotation90", "Translation", "Scale", "Brightness", "Contrast",
           "Rotation3D", "Product", "parse_orbit", "orbit_from_spec", "list_orbits"]

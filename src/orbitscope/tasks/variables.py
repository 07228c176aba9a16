"""What a recorded variable *is*: its kind, direction, need for labels, label and unit.

Every variable a task, the engine or an analysis records carries a :class:`Variable`; results
keep it in the variable's xarray attrs (``kind``, ``lower_is_better``, ``needs_labels``, ``label``,
``unit``, ``description``), and intervals, plots, rankings, dimension reduction and the interface
read it from there (:func:`variable_meta`) instead of keeping tables of metric names.

Kinds:

=============  ==========================================================  ==================
kind           values                                                      aggregate interval
=============  ==========================================================  ==================
binary         0/1 per sample and element (e.g. ``correct``)               Wilson score
probability    in [0, 1] (e.g. ``confidence``, IoU)                        Student-t, clipped
real           any real number (e.g. entropy, an error in pixels)          Student-t
count          non-negative integers                                       Student-t
state          per-sample state for a dataset-level metric (not averaged)  none
=============  ==========================================================  ==================
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Mapping

__all__ = ["Variable", "VariableKind", "VARIABLE_KINDS", "variable_meta", "ENGINE_VARIABLES"]

#: What a recorded variable's values are (the module docstring's table of kinds).
VariableKind = Literal["binary", "probability", "real", "count", "state"]
#: The variable kinds, as a tuple (see :data:`VariableKind`).
VARIABLE_KINDS: tuple[str, ...] = ("binary", "probability", "real", "count", "state")


@dataclass(frozen=True)
class Variable:
    """One recorded quantity and its meaning.

    Args:
        name: the variable's name in results.
        dtype: numpy dtype of the stored values.
        extra_dims: trailing dims after ``sample`` × orbit dims (e.g. ``("class",)``).
        description: one line for docs and tooltips.
        kind: see the module table.
        lower_is_better: True for errors, losses, entropies.
        needs_labels: True when the value is computed against the target (label-free analyses
            such as consensus views skip these or score them against the consensus instead).
        label: human-readable name for axes and legends (default: ``name``).
        unit: unit of the values (``""`` for dimensionless).
    """

    name: str
    dtype: str
    extra_dims: tuple[str, ...] = ()
    description: str = ""
    kind: VariableKind = "real"
    lower_is_better: bool = False
    needs_labels: bool = True
    label: str = ""
    unit: str = ""

    def __post_init__(self) -> None:
        if self.kind not in VARIABLE_KINDS:
            raise ValueError(f"variable kind must be one of {VARIABLE_KINDS}, got {self.kind!r}")

    @property
    def bounded(self) -> bool:
        """Values lie in [0, 1] (binary and probability kinds)."""
        return self.kind in ("binary", "probability")

    @property
    def display(self) -> str:
        """The label with its unit, e.g. ``"entropy (nats)"``."""
        text = self.label or self.name
        return f"{text} ({self.unit})" if self.unit and f"({self.unit})" not in text else text

    def attrs(self) -> dict[str, Any]:
        """The metadata as xarray attrs (JSON/netCDF-friendly: bools as ints)."""
        return {"kind": self.kind, "lower_is_better": int(self.lower_is_better), "needs_labels": int(self.needs_labels),
                "label": self.label or self.name, "unit": self.unit, "description": self.description}

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra_dims"] = list(self.extra_dims)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Variable":
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["extra_dims"] = tuple(fields.get("extra_dims", ()))
        return cls(**fields)

    def renamed(self, name: str, **changes: Any) -> "Variable":
        return replace(self, name=name, **changes)


#: Variables the engine itself records (not the task's).
ENGINE_VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable("label", "int64", description="the sample's class label", kind="state", label="label"),
        Variable("input", "uint8", ("channel", "y", "x"), "the untransformed input, 8-bit", kind="state",
                 needs_labels=False, label="input"),
        Variable("input_points", "float32", ("point", "xyz"), "the untransformed point cloud", kind="state",
                 needs_labels=False, label="input points"),
        Variable("activation", "float32", ("layer", "stat"), "statistics of intermediate activations",
                 kind="real", needs_labels=False, label="activation"),
    )
}


def variable_meta(data: Any, name: str | None = None) -> Variable:
    """The :class:`Variable` of a result's variable (an OrbitResult / xarray Dataset and a name,
    or an xarray DataArray). Variables without metadata (results made by another program) are
    ``real``, higher-is-better, with their name as label."""
    da = data if name is None else (data.data[name] if hasattr(data, "data") and not hasattr(data, "dims") else data[name])
    a = getattr(da, "attrs", {}) or {}
    vname = str(name if name is not None else getattr(da, "name", ""))
    if "kind" not in a or a.get("kind") not in VARIABLE_KINDS:
        return Variable(vname, str(getattr(da, "dtype", "float32")), label=vname)
    return Variable(
        vname, str(getattr(da, "dtype", "float32")), description=str(a.get("description", "")), kind=a["kind"],
        lower_is_better=bool(int(a.get("lower_is_better", 0))), needs_labels=bool(int(a.get("needs_labels", 1))),
        label=str(a.get("label") or vname), unit=str(a.get("unit", "")),
    )

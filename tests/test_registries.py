"""The pluggable registries: perturbation samplers, sequential tests, data specs, task views.

Each test registers a custom entry, uses it through the public parser / factory, and checks the
built-in names still behave as before. Registrations are undone after each test (monkeypatch
restores the registry's table), so other tests see the built-in entries only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from torch import Tensor

from orbitscope._registry import Registry
from orbitscope.data.datasets import DATA_SPECS, ArrayDataset, parse_data_spec, register_data_spec
from orbitscope.errors import NotFoundError, SpecError
from orbitscope.robust.samplers import (
    PERTURBATIONS,
    PixelSampler,
    ProductSampler,
    RandomRotation,
    list_perturbations,
    parse_perturbation,
    register_perturbation,
    sampler_from_spec,
)
from orbitscope.robust.sequential import TESTS, UNDECIDED, RobustnessTest, list_tests, make_test, register_test


def _isolate(monkeypatch: pytest.MonkeyPatch, registry: Registry) -> None:
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))


# --------------------------------------------------------------------------- perturbations


class SaltPepper(PixelSampler):
    """Sets a fraction ``rate`` of the values to 0 or 1 (optionally only to 1: ``:salt``)."""

    kind = "saltpepper"
    cli_flags = ("salt",)

    def __init__(self, rate: float, salt_only: bool = False) -> None:
        if not 0 < float(rate) < 1:
            raise SpecError(f"rate must lie in (0, 1), got {rate}")
        self.rate, self.salt_only = float(rate), bool(salt_only)

    @classmethod
    def from_cli(cls, numbers: list[float], flags: set[str]) -> SaltPepper:
        return cls(numbers[0], salt_only="salt" in flags)

    def sample(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        self._prepare(x, generator)
        hit = torch.rand(x.shape, generator=generator, device=x.device) < self.rate
        value = torch.ones_like(x) if self.salt_only else (torch.rand(x.shape, generator=generator) < 0.5).to(x)
        return torch.where(hit, value, x)

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "rate": self.rate, "salt_only": self.salt_only}

    def __str__(self) -> str:
        return f"saltpepper:{self.rate:g}" + (":salt" if self.salt_only else "")


def test_builtin_perturbations_unchanged() -> None:
    assert list_perturbations() == ["brightness", "gaussian", "l2", "linf", "rotation", "scale", "shift"]
    assert PERTURBATIONS.names() == list_perturbations()
    assert PERTURBATIONS.get("rotation") is RandomRotation
    with pytest.raises(NotFoundError, match="known: brightness"):
        PERTURBATIONS.get("blur")


def test_custom_perturbation(monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, PERTURBATIONS)
    assert register_perturbation(SaltPepper) is SaltPepper
    assert "saltpepper" in list_perturbations()
    s = parse_perturbation("SaltPepper:0.1:salt")
    assert isinstance(s, SaltPepper) and s.rate == 0.1 and s.salt_only
    assert parse_perturbation(str(s)) == s and sampler_from_spec(s.spec()) == s
    prod = parse_perturbation("rotation:10+saltpepper:1/20")
    assert isinstance(prod, ProductSampler) and prod.pixel[0].rate == pytest.approx(0.05)
    assert sampler_from_spec(prod.spec()) == prod
    x = torch.full((4, 1, 6, 6), 0.5)
    out = s.sample(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and set(out.unique().tolist()) <= {0.5, 1.0}
    # its syntax is used in messages, and its own checks are reported with the spec
    with pytest.raises(SpecError, match=r"saltpepper:X\[:salt\]"):
        parse_perturbation("saltpepper:0.1:0.2")
    with pytest.raises(SpecError, match=r"perturbation 'saltpepper:2': rate must lie in \(0, 1\)"):
        parse_perturbation("saltpepper:2")
    with pytest.raises(SpecError, match="saltpepper"):
        parse_perturbation("blur:1")  # the help lists the new family


def test_perturbation_registration_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, PERTURBATIONS)

    class Bad(SaltPepper):
        kind = "Salt:Pepper"

    with pytest.raises(SpecError, match="lower-case"):
        register_perturbation(Bad)
    with pytest.raises(TypeError, match="PerturbationSampler subclass"):
        register_perturbation(int)  # type: ignore[arg-type]

    class Other(SaltPepper):
        kind = "linf"

    with pytest.raises(SpecError, match="already registered"):
        register_perturbation(Other)
    register_perturbation(Other, replace=True)
    assert isinstance(parse_perturbation("linf:0.5"), Other)


# --------------------------------------------------------------------------- sequential tests


@dataclass(frozen=True, kw_only=True)
class EmpiricalTest(RobustnessTest):
    """Certify after ``budget`` samples when the empirical failure rate is below ``margin`` κ (no
    error control: a registration example only)."""

    margin: float = 0.5
    look: int = 8
    name: ClassVar[str] = "empirical"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.budget is None:
            object.__setattr__(self, "budget", 64)

    def _decide(self, f: np.ndarray, t: np.ndarray) -> np.ndarray:
        done = t >= self.budget
        return np.where(done, np.where(f < self.margin * self.kappa * t, 1, -1), UNDECIDED)

    def upper_bound(self, failures: Any, n: Any) -> np.ndarray:
        f, t = np.asarray(failures, float), np.asarray(n, float)
        return np.where(t > 0, f / np.maximum(t, 1), 1.0)


def test_builtin_tests_unchanged() -> None:
    assert list_tests() == ["binomial", "published", "sprt", "confidence-sequence"]
    assert set(TESTS.names()) == set(list_tests())


def test_custom_test(monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, TESTS)
    assert register_test(EmpiricalTest) is EmpiricalTest
    assert list_tests()[-1] == "empirical" and list_tests()[:4] == ["binomial", "published", "sprt", "confidence-sequence"]
    t = make_test("empirical", kappa=0.1, alpha=0.05, margin=0.25)
    assert isinstance(t, EmpiricalTest) and t.budget == 64 and t.spec()["name"] == "empirical"
    assert t.decide(np.array([0, 10]), np.array([64, 64])).tolist() == [1, -1]
    with pytest.raises(SpecError, match=r"options are \['look', 'margin'\]"):
        make_test("empirical", kappa=0.1, alpha=0.05, p1=0.01)

    from orbitscope.robust.certify import certify

    class Zero(torch.nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return torch.stack([torch.ones(len(x)), torch.zeros(len(x))], 1)

    res = certify(Zero(), (torch.rand(3, 1, 4, 4), torch.zeros(3, dtype=torch.long)), "linf:0.1",
                  test="empirical", kappa=0.1, alpha=0.05)
    assert res.test["name"] == "empirical" and res.samples.tolist() == [64, 64, 64] and res.certified.all()


def test_test_registration_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, TESTS)

    with pytest.raises(TypeError, match="RobustnessTest subclass"):
        register_test(dict)  # type: ignore[arg-type]

    @dataclass(frozen=True, kw_only=True)
    class Unnamed(RobustnessTest):
        pass

    with pytest.raises(SpecError, match="name must be a non-empty lower-case string"):
        register_test(Unnamed)
    with pytest.raises(SpecError, match="already registered"):
        register_test(type("SPRT2", (EmpiricalTest,), {"name": "sprt", "__module__": __name__}))


# --------------------------------------------------------------------------- data specs


def test_builtin_data_specs_unchanged() -> None:
    # coco: issue 13; piv-synthetic and flow-folder: issue 14; meshes and modelnet: issue 15
    assert DATA_SPECS.names() == ["coco", "fashion-mnist", "flow-folder", "folder", "idx", "meshes", "mnist-subset",
                                  "modelnet", "npz", "piv-synthetic"]
    with pytest.raises(SpecError, match="accepted forms: mnist-subset.*npz:PATH"):
        parse_data_spec("cifar10")


def test_custom_data_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, DATA_SPECS)
    calls: list[str] = []

    @register_data_spec("toy", usage="toy[:N]")
    def toy(rest: str) -> ArrayDataset:
        calls.append(rest)
        if rest and not rest.isdigit():
            raise SpecError(f"N must be a whole number, got {rest!r}")
        n = int(rest or 8)
        rng = np.random.default_rng(0)
        return ArrayDataset(rng.integers(0, 256, (n, 1, 4, 4), dtype=np.uint8), np.arange(n) % 2, f"toy:{n}")

    ds = parse_data_spec("TOY:12@5")
    assert calls == ["12"] and len(ds) == 5 and ds.data_id == "toy:12@5" and ds.labels.tolist() == [0, 1, 0, 1, 0]
    assert len(parse_data_spec("toy")) == 8
    with pytest.raises(SpecError, match=r"data spec 'toy:x': N must be a whole number, got 'x'"):
        parse_data_spec("toy:x")
    with pytest.raises(SpecError, match=r"accepted forms: .*toy\[:N\]"):
        parse_data_spec("nope")
    with pytest.raises(SpecError, match="asked for 99 samples but toy:8 has 8"):
        parse_data_spec("toy@99")


def test_custom_data_spec_without_subset(monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, DATA_SPECS)
    pairs = torch.utils.data.TensorDataset(torch.rand(6, 1, 2, 2), torch.zeros(6, dtype=torch.long))
    DATA_SPECS.register("pairs", lambda rest: pairs)  # plain registration: default usage in messages
    sub = parse_data_spec("pairs@4")
    assert len(sub) == 4 and sub.data_id == "pairs@4"
    with pytest.raises(SpecError, match=r"pairs\[:ARGS\]"):
        parse_data_spec("nope")


def test_data_spec_registration_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, DATA_SPECS)
    for bad in ("", "Toy", "to:y", "t@y", "t y"):
        with pytest.raises(SpecError, match="data spec prefix"):
            register_data_spec(bad, lambda rest: None)
    with pytest.raises(TypeError, match="callable"):
        register_data_spec("toy", 3)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="already registered"):
        register_data_spec("npz", lambda rest: None)
    DATA_SPECS.register("broken", lambda rest: 42)
    with pytest.raises(TypeError, match="returned int, not a dataset"):
        parse_data_spec("broken")


# --------------------------------------------------------------------------- task views


def test_views(monkeypatch: pytest.MonkeyPatch) -> None:
    from orbitscope.app.views import VIEWS, TaskView, list_views, register_view, view_for
    from orbitscope.app.views.classification import ClassificationView

    assert "classification" in VIEWS and list_views() == VIEWS.names()  # registered on import
    assert isinstance(view_for("classification"), ClassificationView)
    assert type(view_for(None)) is TaskView and type(view_for("no-such-task")) is TaskView
    _isolate(monkeypatch, VIEWS)

    @register_view
    class DetectionView(TaskView):
        kind = "detection"

        def subset_options(self, results):
            return [("all boxes", 0)]

    assert isinstance(view_for("detection"), DetectionView) and "detection" in list_views()
    assert view_for("detection").subset_options([]) == [("all boxes", 0)]

    @register_view
    class Better(ClassificationView):  # a later registration replaces the view of a kind
        kind = "classification"

    assert type(view_for("classification")) is Better

    class Inherited(DetectionView):  # forgot its own kind
        pass

    with pytest.raises(SpecError, match="needs its own non-empty kind"):
        register_view(Inherited)
    with pytest.raises(TypeError, match="TaskView subclass"):
        register_view(object)  # type: ignore[arg-type]


def test_classification_view_restored() -> None:
    from orbitscope.app.views import view_for
    from orbitscope.app.views.classification import ClassificationView

    assert type(view_for("classification")) is ClassificationView

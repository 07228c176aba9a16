"""Certify probabilistic robustness input by input, with sequential tests, in full model batches.

For every input x the loop draws perturbations x' from a sampler (:mod:`.samplers`), counts
failures z = 1[f(x') ≠ y] (``label_free=True``: 1[f(x') ≠ f(x)]), and runs a hypothesis test of
H0: p(x) ≥ κ (:mod:`.sequential`) look by look: the test says how many more samples an input
needs before its next look (``next_look``) and decides from the cumulative counts (``decide``).
An input is certified (``ROBUST``) when H0 is rejected at level α (p(x) < κ with confidence
1 − α), ``NOT_ROBUST`` when the test stops without certifying (evidence that p(x) is not below κ;
each test in :mod:`.sequential` states what it claims), and ``UNDECIDED`` when the sample budget
runs out first. With failures counted against the label, a misclassified input is
never certified: it is marked ``NOT_ROBUST`` without a test (``skipped``) and only draws the
``tower_m`` perturbations every input contributes to the dataset-level failure bounds.

Scheduling: a pool of undecided inputs (at most ``max_active``) shares every forward batch.
Each batch of ``batch_size`` perturbed images is filled, input by input in pool order, with
samples of the inputs' current looks only; an input leaves the pool the moment its test
decides (its place goes to the next input of the data), so decided inputs stop consuming model
queries while the others continue in the same batches. Query counts are exact: ``samples[i]``
perturbed evaluations of input i, plus one clean evaluation per input.

Determinism: input i (its position in ``data``) has its own endless stream of perturbations,
drawn in blocks of :func:`block_size` samples, block b from a ``torch.Generator`` seeded with
``SeedSequence([seed, i, b])`` (:func:`perturbation_stream`); its looks take consecutive samples
of the stream. The k-th perturbation of an input is therefore the same whatever the batch size,
the pool, the other inputs, and the test (tests compared on one seed see the same samples), and
a per-input loop over :func:`perturbation_stream` reproduces certify's counts exactly.
Sharded = local, bit for bit: certifying on an executor (``certify(..., executor="process")``,
:mod:`.sharded`) splits the inputs into contiguous shards, one job each, and a shard starting at
input s numbers its streams from s (``stream_offset``); since streams are per input, every input
draws exactly the perturbations of a local run, and the merged result equals the local one
(per-input arrays, queries, dataset numbers), provided sampling runs on the same kind of device
(a CUDA generator draws other numbers than a CPU one).
"""

from __future__ import annotations

import csv
import logging
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..engine.model_call import ModelCall
from ..engine.source import DataSource
from ..errors import DataError, ModelError
from ..kinds.image import prepare_images
from .samplers import PerturbationSampler, parse_perturbation
from .sequential import DEFAULT_TEST, NOT_ROBUST, ROBUST, UNDECIDED, RobustnessTest, default_budget, make_test

if TYPE_CHECKING:
    from ..engine.executors import Executor

__all__ = ["CertificationResult", "certify", "certify_forward", "certify_slice", "merge_certifications",
           "dataset_numbers", "perturbation_stream", "block_size", "OUTCOME_NAMES", "PER_INPUT_FIELDS"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int | None], None]
#: Printable names of the int8 outcomes.
OUTCOME_NAMES = {int(ROBUST): "robust", int(NOT_ROBUST): "not robust", int(UNDECIDED): "undecided"}
#: The per-input arrays of a :class:`CertificationResult` (one entry per input, in data order).
PER_INPUT_FIELDS = ("outcome", "samples", "failures", "looks", "bound", "label", "clean_pred", "first_failure",
                    "tower_failures", "skipped")
#: The settings every part of a sharded certification must share (:func:`merge_certifications`).
_SHARED_SETTINGS = ("tower_m", "kappa", "alpha", "budget", "label_free", "seed", "test", "sampler", "perturbation")
#: At most this many bytes (and samples) of perturbed images generated at once for one input.
_BLOCK_BYTES = 32 * 2**20
#: Most perturbations per input behind the test-set bound (the test's first look, if smaller).
_TOWER_MAX = 64
_MAX_BLOCK = 256


# ---------------------------------------------------------------------------------------------
# result
# ---------------------------------------------------------------------------------------------


@dataclass
class CertificationResult:
    """Per-input verdicts and counts of :func:`certify`, and dataset-level numbers.

    Arrays have one entry per input, in data order. ``outcome`` is int8 (``ROBUST`` = 1,
    ``NOT_ROBUST`` = −1, ``UNDECIDED`` = 0); ``samples``/``failures`` count perturbed evaluations
    and failures; ``bound`` is the test's upper confidence bound on p(x); ``label`` is −1 where
    unknown; ``clean_pred`` is the prediction on the unperturbed input; ``skipped`` marks
    misclassified inputs that were not tested (label mode: ``NOT_ROBUST`` by definition).
    ``first_failure`` is the failure of each input's first perturbation (a Bernoulli(p(x)) draw)
    and ``tower_failures`` the failures among its first ``tower_m`` perturbations (the same m for
    every input, fixed before sampling): the data of the global bounds on E_x[p(x)].
    ``queries`` = all model evaluations (``samples.sum()`` plus one clean evaluation per input).
    ``counterexamples`` (when asked for) holds each input's first failing perturbation, or the
    input itself where none was found.
    """

    outcome: np.ndarray
    samples: np.ndarray
    failures: np.ndarray
    looks: np.ndarray
    bound: np.ndarray
    label: np.ndarray
    clean_pred: np.ndarray
    first_failure: np.ndarray
    tower_failures: np.ndarray
    skipped: np.ndarray
    queries: int
    tower_m: int
    kappa: float
    alpha: float
    budget: int
    label_free: bool
    seed: int
    test: dict[str, Any]
    sampler: dict[str, Any]
    perturbation: str
    seconds: float
    counterexamples: Tensor | None = None
    dataset: dict[str, Any] = field(default_factory=dict)

    @property
    def n_inputs(self) -> int:
        return int(len(self.outcome))

    @property
    def has_labels(self) -> bool:
        return bool(len(self.label)) and bool((self.label >= 0).all())

    @property
    def clean_correct(self) -> np.ndarray:
        """bool (N,): clean prediction equals the label (False where the label is unknown)."""
        return (self.clean_pred == self.label) & (self.label >= 0)

    @property
    def certified(self) -> np.ndarray:
        """bool (N,): the test certified the input (p(x) < κ at level α)."""
        return self.outcome == ROBUST

    @property
    def has_counterexample(self) -> np.ndarray:
        """bool (N,): at least one failing perturbation was found."""
        return self.failures > 0

    def summary(self) -> dict[str, Any]:
        """Dataset-level numbers (see :func:`dataset_numbers`) with the run's settings."""
        return {
            "test": self.test.get("name", ""),
            "perturbation": self.perturbation,
            "kappa": self.kappa,
            "alpha": self.alpha,
            "budget": self.budget,
            "label_free": self.label_free,
            **self.dataset,
        }

    def rows(self) -> list[dict[str, Any]]:
        """One dict per input (for CSV)."""
        out = []
        for i in range(self.n_inputs):
            out.append({
                "input": i,
                "label": int(self.label[i]),
                "clean_pred": int(self.clean_pred[i]),
                "clean_correct": bool(self.clean_correct[i]),
                "outcome": OUTCOME_NAMES[int(self.outcome[i])],
                "samples": int(self.samples[i]),
                "failures": int(self.failures[i]),
                "looks": int(self.looks[i]),
                "skipped": bool(self.skipped[i]),
                "failure_rate": float(self.failures[i] / self.samples[i]) if self.samples[i] else float("nan"),
                "upper_bound": float(self.bound[i]),
            })
        return out

    def to_csv(self, path: str | Path) -> Path:
        """Write :meth:`rows` to a CSV file; returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        rows = self.rows()
        with p.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["input"])
            writer.writeheader()
            writer.writerows(rows)
        return p


def dataset_numbers(result: CertificationResult, confidence: float = 0.95) -> dict[str, Any]:
    """Dataset-level numbers of a certification (fractions in [0, 1]; NaN where undefined).

    Computed with :mod:`.bounds` (exact Clopper–Pearson intervals):

    * ``certified_robust_accuracy`` (with ``_lower``/``_upper``, a two-sided ``confidence``
      interval for a random input of the data distribution): correctly classified *and*
      certified inputs over all inputs (Mu & Lim's score); ``robust_accuracy_lower``: the lower
      bound this implies on P(p(x) < κ), allowing each test its false-certification rate α;
    * ``certified_among_correct``: certified among the correctly classified inputs;
    * ``certified_rate``: certified over all inputs (label-free: prediction-stable inputs);
    * ``clean_accuracy``, ``not_robust_rate``, ``undecided_rate``;
    * ``global_*``: E_x[p(x)] over the data distribution from each input's first perturbation
      (i.i.d. Bernoulli(E_x[p(x)]) draws): estimate, upper (1 − α) bound, and whether that bound
      is below κ (the "tower" test at level α);
    * ``test_set_*``: the same for the mean of p(x) over the given inputs, from their first
      ``tower_m`` perturbations each;
    * ``mean_samples`` (perturbed samples per input), ``queries`` (model evaluations).
    """
    from . import bounds

    nan = float("nan")
    labelled = result.has_labels
    correct = result.clean_correct
    outcome = result.outcome.astype(np.int64)
    if labelled:  # label-free runs may certify a stably wrong prediction: it is not accuracy
        outcome = np.where((outcome == ROBUST) & ~correct, NOT_ROBUST, outcome)
    acc = bounds.certified_robust_accuracy(outcome, correct if labelled else None, confidence=confidence,
                                           alpha=result.alpha)
    level = 1.0 - result.alpha
    pop = bounds.tower_bound_population(result.first_failure, confidence=level)
    test_set = bounds.tower_bound_test_set(result.tower_failures, result.tower_m, confidence=level)
    return {
        "n_inputs": result.n_inputs,
        "clean_accuracy": acc.clean_accuracy.estimate if acc.clean_accuracy else nan,
        "certified_robust_accuracy": acc.certified.estimate if labelled else nan,
        "certified_robust_accuracy_lower": acc.certified.lower if labelled else nan,
        "certified_robust_accuracy_upper": acc.certified.upper if labelled else nan,
        "robust_accuracy_lower": acc.robust_lower if labelled and acc.robust_lower is not None else nan,
        "certified_among_correct": acc.among_correct.estimate if acc.among_correct else nan,
        "certified_rate": float((result.outcome == ROBUST).mean()),
        "not_robust_rate": float((result.outcome == NOT_ROBUST).mean()),
        "undecided_rate": float((result.outcome == UNDECIDED).mean()),
        "global_failure_estimate": pop.estimate,
        "global_upper_bound": pop.upper,
        "global_certified": bool(pop.upper < result.kappa),
        "test_set_failure_estimate": test_set.estimate,
        "test_set_upper_bound": test_set.upper,
        "test_set_certified": bool(test_set.upper < result.kappa),
        "tower_m": result.tower_m,
        "mean_samples": float(result.samples.mean()),
        "queries": int(result.queries),
        "confidence": confidence,
    }


def merge_certifications(parts: Sequence[CertificationResult], seconds: float | None = None) -> CertificationResult:
    """One result from the results of consecutive parts of the data, in data order (the shards of
    :func:`certify` on an executor): per-input arrays (and counterexamples) concatenated, queries
    summed, :func:`dataset_numbers` recomputed; ``seconds`` (default: the parts' sum) is the run's
    wall time. The parts must share their settings (test, sampler, κ, α, budget, ``tower_m``,
    mode, seed); a ValueError names the first that differs."""
    if not parts:
        raise ValueError("no certification results to merge")
    first = parts[0]
    for k, part in enumerate(parts[1:], start=1):
        for name in _SHARED_SETTINGS:
            if getattr(part, name) != getattr(first, name):
                raise ValueError(f"part {k} of the certification has {name} = {getattr(part, name)!r}, part 0 "
                                 f"{getattr(first, name)!r}: the parts come from different settings (or from "
                                 "workers running another orbitscope version) and cannot be merged")
    if any((p.counterexamples is None) != (first.counterexamples is None) for p in parts):
        raise ValueError("some parts of the certification kept counterexamples and others did not")
    arrays = {name: np.concatenate([getattr(p, name) for p in parts]) for name in PER_INPUT_FIELDS}
    counterexamples = None if first.counterexamples is None else \
        torch.cat([p.counterexamples for p in parts if p.counterexamples is not None])
    result = replace(first, **arrays, queries=int(sum(p.queries for p in parts)), counterexamples=counterexamples,
                     seconds=float(sum(p.seconds for p in parts) if seconds is None else seconds), dataset={})
    result.dataset = dataset_numbers(result)
    return result


# ---------------------------------------------------------------------------------------------
# per-input perturbation streams
# ---------------------------------------------------------------------------------------------


def block_size(image_numel: int) -> int:
    """Perturbations generated per sampler call for one input (depends on the image size only)."""
    return int(max(1, min(_MAX_BLOCK, _BLOCK_BYTES // (4 * max(1, int(image_numel))))))


def _stream_seed(seed: int, index: int, block: int) -> int:
    return int(np.random.SeedSequence([seed, index, block]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def perturbation_stream(sampler: PerturbationSampler, x: Tensor, *, seed: int, index: int) -> Iterator[Tensor]:
    """The endless perturbation stream of input ``index``: blocks (m, C, H, W), m = :func:`block_size`.

    ``x`` is one input (1, C, H, W) in [0, 1] on the device where sampling happens. Block b is
    ``sampler.sample`` of x repeated m times, with a generator on x's device seeded from
    ``SeedSequence([seed, index, b])``.
    """
    m = block_size(x[0].numel())
    b = 0
    while True:
        gen = torch.Generator(device=x.device)
        gen.manual_seed(_stream_seed(seed, index, b))
        out = sampler.sample(x.expand(m, *x.shape[1:]), gen)
        if out.shape != (m, *x.shape[1:]):
            raise ValueError(f"the sampler {sampler} returned shape {tuple(out.shape)} for inputs {(m, *x.shape[1:])}")
        yield out
        b += 1


# ---------------------------------------------------------------------------------------------
# the scheduling loop
# ---------------------------------------------------------------------------------------------


class _Input:
    """An undecided input in the pool: its counts, its stream, and the state of its current look."""

    __slots__ = ("index", "x", "target", "skip", "n", "f", "look", "look_size", "assigned", "look_done", "look_fail",
                 "stream", "buffer", "pos", "first_failure", "tower_f", "counterexample")

    def __init__(self, index: int, x: Tensor, target: int, skip: bool, stream: Iterator[Tensor]) -> None:
        self.index, self.x, self.target, self.skip, self.stream = index, x, target, skip, stream
        self.tower_f = 0
        self.n = self.f = self.look = 0
        self.look_size = self.assigned = self.look_done = self.look_fail = 0
        self.buffer: Tensor | None = None
        self.pos = 0
        self.first_failure: bool | None = None
        self.counterexample: Tensor | None = None

    def start_look(self, size: int) -> None:
        self.look_size, self.assigned, self.look_done, self.look_fail = int(size), 0, 0, 0

    def take(self, k: int) -> Tensor:
        """Up to k next samples of the stream (for the current look)."""
        if self.buffer is None or self.pos == len(self.buffer):
            self.buffer, self.pos = next(self.stream), 0
        out = self.buffer[self.pos : self.pos + k]
        self.pos += len(out)
        self.assigned += len(out)
        return out


@dataclass
class _Outputs:
    n: int
    outcome: dict[int, int] = field(default_factory=dict)
    samples: dict[int, int] = field(default_factory=dict)
    failures: dict[int, int] = field(default_factory=dict)
    looks: dict[int, int] = field(default_factory=dict)
    label: dict[int, int] = field(default_factory=dict)
    clean_pred: dict[int, int] = field(default_factory=dict)
    first_failure: dict[int, bool] = field(default_factory=dict)
    tower_failures: dict[int, int] = field(default_factory=dict)
    skipped: dict[int, bool] = field(default_factory=dict)
    counterexample: dict[int, Tensor] = field(default_factory=dict)


def _predict(forward: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    out = forward(x)
    if not isinstance(out, Tensor):
        raise ModelError(f"the model must return a tensor of class scores, got {type(out).__name__}")
    if out.ndim != 2 or out.shape[0] != x.shape[0]:
        raise ModelError(f"the model must return class scores of shape (B, classes) = ({x.shape[0]}, K), "
                         f"got {tuple(out.shape)}")
    bad = ~torch.isfinite(out).all(dim=1)
    if bool(bad.any()):
        raise ModelError(f"the model returned NaN/inf scores for {int(bad.sum())} of {len(out)} inputs in a batch; "
                         "check the model and its inputs (and the normalisation)")
    return out.argmax(dim=1)


def _run(
    forward: Callable[[Tensor], Tensor],
    source: DataSource,
    sampler: PerturbationSampler,
    test: RobustnessTest,
    *,
    cap: int,
    tower_m: int,
    label_free: bool,
    batch_size: int,
    max_active: int,
    device: torch.device,
    seed: int,
    keep_counterexamples: bool,
    progress: Progress | None,
    stream_offset: int = 0,
) -> tuple[_Outputs, int]:
    """The pool loop; returns per-input outputs (by data index) and the number of queries."""
    out = _Outputs(n=0)
    queries = 0
    loaded: deque[tuple[int, Tensor, int, bool]] = deque()  # (index, x (1,C,H,W), target, skip)
    chunks = source.chunks(set())
    exhausted = False
    active: dict[int, _Input] = {}
    shape: tuple[int, ...] | None = None

    def load() -> bool:
        """Read the next chunk of data and evaluate it unperturbed (one query per input)."""
        nonlocal exhausted, queries, shape
        try:
            _, start, batch = next(chunks)
        except StopIteration:
            exhausted = True
            return False
        if not isinstance(batch, (tuple, list)) or len(batch) < 2:
            raise DataError("data items must be (image, label) pairs")
        x = prepare_images(batch[0], device)
        raw = torch.as_tensor(batch[1])
        if raw.ndim == 2 and raw.shape[0] == len(x) and raw.shape[1] > 1:
            raise DataError(f"labels of shape {tuple(raw.shape)} look like one-hot labels or class scores: pass "
                            "class indices of shape (N,), e.g. labels.argmax(1)")
        if not label_free and raw.is_floating_point():
            whole = torch.isfinite(raw) & (raw == raw.round())
            if not bool(whole.all()):
                bad = raw.reshape(-1)[~whole.reshape(-1)][0].item()
                raise DataError(f"labels must be integer class indices, found {bad!r}: pass class indices 0..K-1 "
                                "(or label_free=True to certify without labels)")
        labels = raw.reshape(-1).long().cpu()
        if len(labels) != len(x):
            raise DataError(f"a batch holds {len(x)} images but {len(labels)} labels")
        n_scores: list[int] = []

        def scores(xb: Tensor) -> Tensor:  # the clean pass also gives the label check the model's class count
            s = forward(xb)
            if isinstance(s, Tensor) and s.ndim == 2:
                n_scores.append(int(s.shape[1]))
            return s

        if shape is None:
            shape = tuple(x.shape[1:])
        elif tuple(x.shape[1:]) != shape:
            raise DataError(f"inputs must all have the same shape (C, H, W): {shape} vs {tuple(x.shape[1:])}")
        with torch.inference_mode():
            preds = torch.cat([_predict(scores, x[s : s + batch_size]) for s in range(0, len(x), batch_size)])
        queries += len(x)
        preds_np, labels_np = preds.cpu().numpy(), labels.numpy()
        if not label_free and bool((labels_np < 0).any()):
            raise DataError("some inputs have no label (-1): certify against labels needs them; "
                            "use label_free=True to test prediction stability instead")
        if not label_free and n_scores and len(labels_np) and int(labels_np.max()) >= min(n_scores):
            k, j = min(n_scores), int(np.argmax(labels_np >= min(n_scores)))
            raise DataError(f"label {int(labels_np[j])} (input {start + j}) is outside the model's classes: the model "
                            f"returns {k} scores per input, so labels must lie in 0..{k - 1}; check that the data "
                            "and the model use the same classes (or pass label_free=True to certify without labels)")
        for j in range(len(x)):
            i = start + j
            out.label[i], out.clean_pred[i] = int(labels_np[j]), int(preds_np[j])
            target = int(preds_np[j]) if label_free else int(labels_np[j])
            loaded.append((i, x[j : j + 1], target, not label_free and target != int(preds_np[j])))
        out.n = max(out.n, start + len(x))
        return True

    def finish(inp: _Input, outcome: int) -> None:
        i = inp.index
        out.outcome[i], out.samples[i], out.failures[i], out.looks[i] = int(outcome), inp.n, inp.f, inp.look
        out.first_failure[i] = bool(inp.first_failure)
        out.tower_failures[i] = inp.tower_f
        out.skipped[i] = inp.skip
        if keep_counterexamples:
            out.counterexample[i] = (inp.counterexample if inp.counterexample is not None else inp.x[0]).cpu()
        active.pop(i, None)

    def advance(inputs: list[_Input]) -> None:
        """Start the next look of undecided inputs, or close them when the budget is spent."""
        sizes = np.asarray(test.next_look(np.array([inp.n for inp in inputs], dtype=np.int64)), dtype=np.int64)
        for inp, m in zip(inputs, sizes.reshape(-1)):
            m = int(min(int(m), cap - inp.n))
            if m <= 0:
                finish(inp, UNDECIDED)
            else:
                inp.start_look(m)

    def refill() -> None:
        fresh: list[_Input] = []
        while len(active) < max_active:
            if not loaded:
                if exhausted or not load():
                    break
                continue
            i, x, target, skip = loaded.popleft()
            inp = _Input(i, x, target, skip, perturbation_stream(sampler, x, seed=seed, index=stream_offset + i))
            active[i] = inp
            if skip:  # misclassified: only the perturbations every input gives the global bounds
                inp.start_look(tower_m)
            else:
                fresh.append(inp)
        if fresh:
            advance(fresh)

    done_reported = -1
    refill()
    while active:
        # fill one forward batch with samples of the pool's current looks, in pool order
        parts: list[tuple[_Input, int]] = []
        images: list[Tensor] = []
        space = batch_size
        for inp in active.values():
            while space > 0 and inp.assigned < inp.look_size:
                piece = inp.take(min(space, inp.look_size - inp.assigned))
                images.append(piece)
                parts.append((inp, len(piece)))
                space -= len(piece)
            if space == 0:
                break
        batch = torch.cat(images) if len(images) > 1 else images[0]
        targets = torch.cat([torch.full((k,), inp.target, dtype=torch.long) for inp, k in parts]).to(device)
        with torch.inference_mode():
            fail = _predict(forward, batch) != targets
        queries += len(batch)
        fail_np = fail.cpu().numpy()
        completed: list[_Input] = []
        pos = 0
        for inp, k in parts:
            seg = fail_np[pos : pos + k]
            first = inp.n + inp.look_done  # stream position of seg[0]
            if first == 0:
                inp.first_failure = bool(seg[0])
            if first < tower_m:
                inp.tower_f += int(seg[: tower_m - first].sum())
            nf = int(seg.sum())
            if keep_counterexamples and nf and inp.counterexample is None:
                inp.counterexample = batch[pos + int(np.argmax(seg))].detach().clone()
            inp.look_done += k
            inp.look_fail += nf
            if inp.look_done == inp.look_size:
                completed.append(inp)
            pos += k
        if completed:
            tested = []
            for inp in completed:
                inp.n += inp.look_size
                inp.f += inp.look_fail
                inp.look += 1
                if inp.skip:
                    finish(inp, NOT_ROBUST)
                else:
                    tested.append(inp)
            if tested:
                f = np.array([inp.f for inp in tested], dtype=np.int64)
                n = np.array([inp.n for inp in tested], dtype=np.int64)
                undecided = []
                for inp, d in zip(tested, np.asarray(test.decide(f, n)).reshape(-1)):
                    if int(d) != UNDECIDED:
                        finish(inp, int(d))
                    else:
                        undecided.append(inp)
                if undecided:
                    advance(undecided)
            refill()
        if progress is not None and len(out.outcome) != done_reported:
            done_reported = len(out.outcome)
            progress(done_reported, source.n)
    return out, queries


# ---------------------------------------------------------------------------------------------
# public entry point
# ---------------------------------------------------------------------------------------------


def _resolve_test(test: str | RobustnessTest | None, kappa: float, alpha: float, budget: int | None) -> RobustnessTest:
    if test is None or isinstance(test, str):
        kwargs: dict[str, Any] = {"kappa": kappa, "alpha": alpha}
        if budget is not None:
            kwargs["budget"] = budget
        return make_test(test or DEFAULT_TEST, **kwargs)
    for attr in ("next_look", "decide", "upper_bound", "spec"):
        if not callable(getattr(test, attr, None)):
            raise TypeError(f"test must be a test name or a RobustnessTest (missing {attr}()), got {type(test).__name__}")
    return test


def _as_source(data: Any, batch_size: int, label_free: bool) -> DataSource:
    if isinstance(data, Tensor) or isinstance(data, np.ndarray):
        if not label_free:
            raise DataError("data given as images only has no labels: pass (images, labels), or label_free=True")
        images = torch.as_tensor(data)
        data = (images, torch.full((len(images),), -1, dtype=torch.long))
    return DataSource(data, batch_size, None)


def certify_forward(
    forward: Callable[[Tensor], Tensor],
    data: Any,
    sampler: PerturbationSampler | str,
    *,
    test: str | RobustnessTest | None = None,
    kappa: float = 0.01,
    alpha: float = 0.01,
    budget: int | None = None,
    label_free: bool = False,
    batch_size: int = 512,
    max_active: int | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
    return_counterexamples: bool = False,
    progress: Progress | None = None,
    stream_offset: int = 0,
) -> CertificationResult:
    """:func:`certify` for a plain function ``forward(images in [0, 1]) -> class scores``.

    The caller handles normalisation and the model's mode (the TorchAttacks adapter uses this
    with ``Attack.get_logits``). Arguments as in :func:`certify`; ``stream_offset`` numbers the
    inputs' perturbation streams from that value instead of 0 (so that successive calls on
    different batches draw independent perturbations).
    """
    sampler = parse_perturbation(sampler)
    rtest = _resolve_test(test, kappa, alpha, budget)
    caps = [int(c) for c in (budget, getattr(rtest, "budget", None)) if c is not None]
    if not caps:  # e.g. the published rule, which has no cap
        caps = [default_budget(rtest.kappa, rtest.alpha)]
        log.info("test %r has no sample budget; capping at %d samples per input", rtest.spec().get("name"), caps[0])
    cap = min(caps)
    if cap < 1:
        raise ValueError(f"budget must be >= 1 sample per input, got {cap}")
    first_look = int(np.asarray(rtest.next_look(np.zeros(1, dtype=np.int64))).reshape(-1)[0])
    tower_m = max(1, min(first_look, cap, _TOWER_MAX))
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    max_active = int(max_active or batch_size)
    if max_active < 1:
        raise ValueError(f"max_active must be >= 1, got {max_active}")
    device = torch.device(device)
    source = _as_source(data, batch_size, label_free)
    t0 = time.perf_counter()
    outs, queries = _run(forward, source, sampler, rtest, cap=cap, tower_m=tower_m, label_free=label_free, batch_size=batch_size,
                         max_active=max_active, device=device, seed=int(seed),
                         keep_counterexamples=return_counterexamples, progress=progress,
                         stream_offset=int(stream_offset))
    if outs.n == 0:
        raise DataError("the dataset is empty: nothing to certify")
    n = outs.n
    idx = range(n)
    samples = np.array([outs.samples[i] for i in idx], dtype=np.int64)
    failures = np.array([outs.failures[i] for i in idx], dtype=np.int64)
    bound = np.asarray(rtest.upper_bound(failures, samples), dtype=np.float64).reshape(-1)
    result = CertificationResult(
        outcome=np.array([outs.outcome[i] for i in idx], dtype=np.int8),
        samples=samples,
        failures=failures,
        looks=np.array([outs.looks[i] for i in idx], dtype=np.int64),
        bound=bound,
        label=np.array([outs.label[i] for i in idx], dtype=np.int64),
        clean_pred=np.array([outs.clean_pred[i] for i in idx], dtype=np.int64),
        first_failure=np.array([outs.first_failure[i] for i in idx], dtype=bool),
        tower_failures=np.array([outs.tower_failures[i] for i in idx], dtype=np.int64),
        skipped=np.array([outs.skipped[i] for i in idx], dtype=bool),
        queries=int(queries),
        tower_m=tower_m,
        kappa=float(rtest.kappa),
        alpha=float(rtest.alpha),
        budget=cap,
        label_free=bool(label_free),
        seed=int(seed),
        test=dict(rtest.spec()),
        sampler=sampler.spec(),
        perturbation=str(sampler),
        seconds=time.perf_counter() - t0,
        counterexamples=torch.stack([outs.counterexample[i] for i in idx]) if return_counterexamples else None,
    )
    result.dataset = dataset_numbers(result)
    return result


def certify_slice(
    model: nn.Module,
    data: Any,
    sampler: PerturbationSampler | str,
    *,
    normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    device: str | torch.device,
    stream_offset: int = 0,
    progress: Progress | None = None,
    **options: Any,
) -> CertificationResult:
    """:func:`certify`'s model path on ``data``, which may be a part of the inputs: ``model`` in eval
    mode behind one :class:`~orbitscope.engine.model_call.ModelCall` (``normalize`` applied after the
    perturbation, failures as ModelError), then :func:`certify_forward` with ``stream_offset`` (the
    position of ``data``'s first input in the whole data) and ``options`` (its other keyword
    arguments: test, kappa, alpha, budget, label_free, batch_size, max_active, seed,
    return_counterexamples). Every shard of a certification on an executor runs this."""
    device = torch.device(device)
    # the one model call (normalise, forward, ModelError on failure); certify's loop slices itself
    forward = ModelCall(model, normalize=normalize, device=device, forward_batch=2**62, what="perturbed inputs")
    with forward.evaluating():
        return certify_forward(forward, data, sampler, device=device, progress=progress, stream_offset=stream_offset,
                               **options)


def certify(
    model: nn.Module,
    data: Any,
    sampler: PerturbationSampler | str,
    *,
    test: str | RobustnessTest | None = None,
    kappa: float = 0.01,
    alpha: float = 0.01,
    budget: int | None = None,
    label_free: bool = False,
    normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    batch_size: int = 512,
    max_active: int | None = None,
    device: str | torch.device | None = None,
    seed: int = 0,
    return_counterexamples: bool = False,
    progress: Progress | None = None,
    executor: str | Executor | None = None,
    shard_size: int = 64,
) -> CertificationResult:
    """Test every input of ``data`` for probabilistic robustness of ``model`` (see module docs).

    Args:
        model: maps images (B, C, H, W) — after ``normalize`` — to class scores (B, classes).
            It is put in eval mode while certifying and restored afterwards.
        data: a map-style Dataset of (image (C, H, W) in [0, 1], label), a DataLoader with a
            fixed batch size, a pair (images (N, C, H, W), labels (N,)), or (with
            ``label_free=True``) images alone. uint8 images are divided by 255.
        sampler: a :class:`~.samplers.PerturbationSampler` or a spec such as ``"linf:8/255"``.
        test: a test name (``"binomial"``, ``"published"``, ``"sprt"``, ``"confidence-sequence"``;
            default :data:`~.sequential.DEFAULT_TEST`) built with ``kappa``, ``alpha`` and
            ``budget``, or a ready :class:`~.sequential.RobustnessTest` (its own κ and α are used).
        kappa: tolerated failure probability κ (an input is robust when p(x) < κ).
        alpha: the test's error level α (probability of certifying an input whose p(x) ≥ κ).
        budget: at most this many perturbed samples per input; None: the test's default (for
            ``"binomial"`` the fixed sample size, which every input then uses; for a test without
            a cap, the published rule, :func:`~.sequential.default_budget`). With a ready test
            it caps the test's own budget. Inputs still undecided at the cap are ``UNDECIDED``.
        label_free: failures against the clean prediction f(x) instead of the label.
        normalize: ``(mean, std)`` per channel, applied after the perturbation.
        batch_size: perturbed images per model call.
        max_active: most inputs in the pool at once (default ``batch_size``).
        device: where sampling and the model run (default: the model's device).
        seed: fixes every perturbation (see the module docs on determinism).
        return_counterexamples: keep each input's first failing perturbation.
        progress: called as ``progress(inputs_decided, n_inputs)`` as inputs are decided (on an
            executor: as shards return).
        executor: None or ``"local"``: certify here, in one pool (the default). Otherwise an
            executor name (``"process"``, ``"ray"``) or instance
            (:class:`~orbitscope.engine.executors.Executor`, a ``LocalExecutor()`` included):
            the inputs are split into shards of ``shard_size`` consecutive inputs, each certified
            by one job (:mod:`.sharded`), and the results merged in data order. The result equals
            the local run's exactly (per-input streams, see the module docs); ``seconds`` is the
            wall time. The data must be readable by index (a Dataset or arrays, not a DataLoader);
            for processes and Ray the model and data travel to the workers (Ray: the model as its
            architecture and weights, :mod:`orbitscope.engine.shipping`), and a sampler or test of
            your own must come from an importable module.
        shard_size: inputs per job with an executor.

    Returns:
        A :class:`CertificationResult`.

    Raises:
        DataError: empty data, images not (B, C, H, W) in [0, 1], missing labels (on an
            executor, the message names the shard's inputs).
        ModelError: the model fails, returns non-(B, classes) scores, or NaN/inf (on an
            executor, the message names the shard's inputs).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    from ..models.reference import model_device

    device = torch.device(device) if device is not None else model_device(model)
    options: dict[str, Any] = dict(test=test, kappa=kappa, alpha=alpha, budget=budget, label_free=label_free,
                                   batch_size=batch_size, max_active=max_active, seed=seed,
                                   return_counterexamples=return_counterexamples)
    if executor is None or executor == "local":
        return certify_slice(model, data, sampler, normalize=normalize, device=device, progress=progress, **options)
    from .sharded import ShardedCertify, run_shards, sampler_spec

    context = ShardedCertify(model=model, data=data, sampler=sampler_spec(parse_perturbation(sampler)),
                             normalize=normalize, device=str(device), options=options, run=certify_slice)
    t0 = time.perf_counter()
    parts = run_shards(context, executor, shard_size=shard_size, progress=progress)
    return merge_certifications(parts, seconds=time.perf_counter() - t0)

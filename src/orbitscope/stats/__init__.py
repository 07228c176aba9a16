"""Statistics over whole orbits: simultaneous bands, a test of invariance, paired model
comparisons with error control across elements, sample-size planning and a release gate.

Every statistic reads one metric as a samples × elements matrix (:func:`orbit_values`), so it
works for every task the engine serves (accuracy, confidence, detection's conf × IoU, flow's
end-point error, point-cloud accuracy); the correlation between elements is kept by
resampling or permuting whole samples.

* :func:`simultaneous_band`: a band covering every element at once (sup-t bootstrap);
* :func:`invariance_test`: the studentized sup-t bootstrap test (or, assuming exchangeable
  elements, Cochran's Q / Friedman / permutation), with the largest drop from the identity and
  its simultaneous interval;
* :func:`compare_models`: exact McNemar or paired t per element, Holm / max-T / FDR across;
* :func:`plan_samples`, :func:`plan_from_pilot`, :func:`simulate_power`: how many samples;
* :func:`check_result`: the gate behind ``orbitscope check`` and :mod:`orbitscope.testing`.
"""

from .bands import Band, simultaneous_band, sup_t_band
from .gate import CheckOutcome, GateReport, check_result
from .invariance import InvarianceTest, invariance_test
from .paired import PairedComparison, compare_models
from .planning import SamplePlan, plan_from_pilot, plan_samples, simulate_power
from .simulate import correlated_orbit
from .values import OrbitValues, orbit_values

__all__ = ["Band", "simultaneous_band", "sup_t_band", "CheckOutcome", "GateReport", "check_result", "InvarianceTest",
           "invariance_test", "PairedComparison", "compare_models", "SamplePlan", "plan_samples", "plan_from_pilot",
           "simulate_power", "correlated_orbit", "OrbitValues", "orbit_values"]

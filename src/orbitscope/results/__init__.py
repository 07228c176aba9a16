"""Results: the labelled :class:`OrbitResult`, its intervals, and the embedded store."""

from .result import OrbitResult, aggregate, assemble_result, check_same_orbit, mean_interval, wilson_interval
from .store import RunRecord, Store, StoreError, default_home, open_store

__all__ = ["OrbitResult", "wilson_interval", "mean_interval", "aggregate", "assemble_result", "check_same_orbit",
           "Store", "StoreError", "RunRecord", "default_home", "open_store"]

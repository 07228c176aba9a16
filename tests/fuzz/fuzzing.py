"""The fuzz suite's machinery (issue 38): Hypothesis profiles, one capped worker process, the check.

Every case is loaded by ``worker.py`` in a separate process whose address space is capped at what
its imports hold plus :data:`CAP_BYTES` (1 GiB), with :data:`CASE_TIMEOUT_S` per case. The worker
is started once per test session and restarted when a case kills it or runs past the time cap, so
the cost of a subprocess (importing torch: a few seconds) is paid once, not per case.

Profiles (``ORBITSCOPE_FUZZ_PROFILE``): ``default`` (what ``make test`` runs: few examples per
target, derandomised so a run is reproducible) and ``long`` (``make fuzz``: many random examples).
The workers run with small data limits (``ORBITSCOPE_MAX_DATA_BYTES=256M``, and the image and
sweep limits of the other loaders left at their defaults), so a generated spec that passes its
bound still fits under the cap.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

#: address space a case may take beyond what the worker's imports hold
CAP_BYTES = 2**30
#: wall-clock seconds one case may take
CASE_TIMEOUT_S = 30.0
#: seconds the worker may take to start (imports torch)
START_TIMEOUT_S = 120.0
PROFILE_ENV = "ORBITSCOPE_FUZZ_PROFILE"

settings.register_profile("fuzz-default", max_examples=25, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])
settings.register_profile("fuzz-long", max_examples=400, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])


def fuzz_settings() -> settings:
    """The profile chosen by ``$ORBITSCOPE_FUZZ_PROFILE`` (``default`` or ``long``)."""
    name = os.environ.get(PROFILE_ENV, "default").strip() or "default"
    if name not in ("default", "long"):
        raise ValueError(f"${PROFILE_ENV}={name!r}: use 'default' or 'long'")
    return settings.get_profile(f"fuzz-{name}")


class Worker:
    """A ``worker.py`` process under the caps; :meth:`load` sends one case and waits for its answer."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0
        self.cases = 0

    def start(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ORBITSCOPE_MAX_DATA_BYTES": "256M"}
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("worker.py")), str(CAP_BYTES)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env, cwd=Path(__file__).parent)
        line = self._read(START_TIMEOUT_S)
        if line is None or not json.loads(line).get("ready"):
            self.stop()
            raise RuntimeError("the fuzz worker did not start")

    def _read(self, timeout: float) -> str | None:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return line or None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def load(self, case: dict[str, Any]) -> dict[str, Any]:
        """The worker's answer for ``case``; ``{"outcome": "hang"}`` or ``"died"`` when it ran past
        the time cap or exited (the worker is restarted for the next case)."""
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self.cases += 1
        try:
            self.proc.stdin.write(json.dumps(case) + "\n")
            self.proc.stdin.flush()
            line = self._read(CASE_TIMEOUT_S)
        except (BrokenPipeError, OSError):
            line = None
        if line is None:
            died = self.proc.poll() is not None
            code = self.proc.returncode
            self.stop()
            self.restarts += 1
            return {"outcome": "died" if died else "hang", "type": f"exit {code}" if died else "timeout",
                    "message": ""}
        return json.loads(line)


def assert_clean(answer: dict[str, Any], case: dict[str, Any], *names: str) -> None:
    """A correct load, or one line (exit 2 on the command line) naming one of ``names`` (the file
    or the spec); never a crash, a hang or a dead worker."""
    shown = {k: (v[:300] if isinstance(v, str) else v) for k, v in case.items()}
    assert answer["outcome"] in ("loaded", "error"), (answer, shown)
    if answer["outcome"] == "error":
        message = answer["message"]
        assert "\n" not in message.strip(), (answer, shown)
        assert len(message) <= 2000, (len(message), message[:300], shown)
        assert any(n and n in message for n in names), ("the message names neither the file nor the spec", message,
                                                         names, shown)

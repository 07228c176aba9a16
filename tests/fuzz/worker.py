"""The fuzz suite's worker: one process that loads cases under a memory cap.

Run as ``python worker.py CAP_BYTES``. It imports orbitscope (torch included) first, then sets
``RLIMIT_AS`` to what it holds then plus ``CAP_BYTES`` (an address-space limit of 1 GiB alone
cannot even map libtorch), prints ``ready``, and answers one JSON line per JSON line read from
stdin: ``{"target": NAME, "path": ..., "spec": ...}`` -> ``{"outcome": "loaded" | "error" |
"crash", "type": exception name, "message": ..., "trace": ...}``. "error" is what the command line
prints as one line with exit status 2 (``orbitscope.cli.common.USER_ERRORS``); anything else
(MemoryError, RecursionError, KeyError, ...) is a "crash". A case that hangs or kills the worker
is caught by the parent (time cap, restart).
"""

from __future__ import annotations

import json
import resource
import sys
import traceback
from typing import Any, Callable

import orbitscope  # noqa: F401 - imported before the cap: torch and the loaders
import orbitscope.data.meshes  # noqa: F401 - registers meshes:
import orbitscope.data.modelnet  # noqa: F401 - registers modelnet:
import orbitscope.data.piv  # noqa: F401 - registers piv-synthetic:, flow-folder:
from orbitscope.cli.common import USER_ERRORS


def _touch(ds: Any) -> str:
    """Read the first and the last item of a dataset (lazy loaders allocate there)."""
    n = len(ds)
    for i in sorted({0, n - 1}) if n else ():
        ds[i]
    return f"{n} items"


def _data_spec(case: dict[str, Any]) -> str:
    from orbitscope.data import parse_data_spec

    return _touch(parse_data_spec(case["spec"]))


def _orbit_spec(case: dict[str, Any]) -> str:
    from orbitscope.group.parse import parse_orbit

    return f"{parse_orbit(case['spec']).size} elements"


def _sweep(case: dict[str, Any]) -> str:
    from orbitscope.engine.sweep_file import load_sweep

    plan = load_sweep(case["path"])
    return f"{len(plan.runs)} runs" if hasattr(plan, "runs") else "loaded"


def _coco(case: dict[str, Any]) -> str:
    from orbitscope.data.coco import read_coco

    return _touch(read_coco(case["path"], case.get("images")))


def _idx(case: dict[str, Any]) -> str:
    from orbitscope.data import read_idx

    return f"shape {read_idx(case['path']).shape}"


def _folder(case: dict[str, Any]) -> str:
    from orbitscope.data import ImageFolder

    return _touch(ImageFolder(case["path"]))


def _flow_folder(case: dict[str, Any]) -> str:
    from orbitscope.data.piv import FlowFolder

    return _touch(FlowFolder(case["path"]))


def _flo(case: dict[str, Any]) -> str:
    from orbitscope.data.piv import read_flo

    return f"shape {read_flo(case['path']).shape}"


def _off(case: dict[str, Any]) -> str:
    from orbitscope.data.modelnet import read_off

    v, f = read_off(case["path"])
    return f"{len(v)} vertices, {len(f)} faces"


def _npz(case: dict[str, Any]) -> str:
    from orbitscope.data import parse_data_spec

    return _touch(parse_data_spec(f"npz:{case['path']}"))


TARGETS: dict[str, Callable[[dict[str, Any]], str]] = {
    "data_spec": _data_spec, "orbit_spec": _orbit_spec, "sweep": _sweep, "coco": _coco, "idx": _idx,
    "folder": _folder, "flow_folder": _flow_folder, "flo": _flo, "off": _off, "npz": _npz,
}


def answer(case: dict[str, Any]) -> dict[str, Any]:
    """Load one case; never raises."""
    try:
        return {"outcome": "loaded", "message": TARGETS[case["target"]](case)}
    except USER_ERRORS as exc:
        return {"outcome": "error", "type": type(exc).__name__, "message": str(exc)[:4000]}
    except (Exception, RecursionError, MemoryError) as exc:  # noqa: BLE001 - what the suite looks for
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-6))
        return {"outcome": "crash", "type": type(exc).__name__, "message": str(exc)[:2000], "trace": trace[-3000:]}


def main() -> None:
    """Set the cap, then answer cases until stdin closes."""
    held = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
    cap = held + int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    print(json.dumps({"ready": True, "held": held, "cap": cap}), flush=True)
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line))
        except MemoryError:  # even the reply did not fit
            reply = {"outcome": "crash", "type": "MemoryError", "message": "", "trace": ""}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()

"""Files that are programs: loading an assessor bundle (a pickle) or a TorchScript archive runs
code chosen by whoever wrote the file, which can read, create or overwrite your files.

orbitscope loads such a file only when it is trusted: either you pass ``trust=True`` (CLI:
``--trust``), or this user account wrote it with orbitscope (its SHA-256 is then recorded in
``$ORBITSCOPE_CONFIG/trusted.json``, default ``$XDG_CONFIG_HOME/orbitscope`` or
``~/.config/orbitscope``). A bundle planted in someone else's store is therefore refused with a
message that names the risk. Safetensors weights, IDX and ``.npz`` data are read without running
code and need no trust.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .errors import SpecError

__all__ = ["UntrustedFileError", "trust_registry", "file_digest", "mark_trusted", "is_trusted", "require_trust"]


class UntrustedFileError(SpecError):
    """A file that would run code was not trusted (see :mod:`orbitscope.trust`)."""


def trust_registry() -> Path:
    """Where this user's record of files written by orbitscope lives."""
    base = os.environ.get("ORBITSCOPE_CONFIG")
    if base:
        return Path(base) / "trusted.json"
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "orbitscope" / "trusted.json"


def file_digest(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read() -> set[str]:
    try:
        return set(json.loads(trust_registry().read_text()).get("sha256", []))
    except (OSError, ValueError, AttributeError):
        return set()


def mark_trusted(path: str | os.PathLike[str]) -> None:
    """Record a file this process wrote as trusted (best effort: an unwritable config is skipped)."""
    digests = _read() | {file_digest(path)}
    reg = trust_registry()
    try:
        reg.parent.mkdir(parents=True, exist_ok=True)
        tmp = reg.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"sha256": sorted(digests)}))
        os.replace(tmp, reg)
    except OSError:
        pass


def is_trusted(path: str | os.PathLike[str]) -> bool:
    return file_digest(path) in _read()


def require_trust(path: str | os.PathLike[str], what: str, trust: bool) -> None:
    """Return if ``trust`` or the file was written by this user with orbitscope; else raise."""
    if trust or is_trusted(path):
        return
    raise UntrustedFileError(
        f"'{path}' is {what}: loading it runs code chosen by whoever wrote it (it can read, create or overwrite "
        "your files), and orbitscope did not write it for you. If you made it or trust its author, pass "
        "trust=True (CLI: --trust)"
    )

"""Trained demo models shipped with orbitscope, so that the demo trains nothing.

Every model the demo evaluates is trained by a recipe in :mod:`orbitscope.training` and cached in
the store as ``<store>/models/<name>-<key>.safetensors`` (the key hashes the whole recipe). The
same files ship inside the package, in ``orbitscope/demos/weights/``, with ``manifest.json``
giving each file's SHA-256 and size. When the demo needs a model whose cache file is missing, it
copies the shipped file of that name into the cache after checking its hash, instead of training;
a file whose hash does not match is ignored (with a warning) and the recipe trains as before.

``make models`` (``orbitscope demo-models``) retrains every recipe from scratch, reproducibly (each
recipe seeds its own training), and writes the files and the manifest here again;
``orbitscope demo --retrain`` trains instead of copying. A changed recipe has a new key, so its
shipped file is simply not found until the models are rebuilt.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..trust import file_digest as file_sha256  # SHA-256 of a file's bytes, as hex

__all__ = ["SHIPPED_WEIGHTS", "MANIFEST", "read_manifest", "file_sha256", "cache_ready", "ship_files"]

logger = logging.getLogger(__name__)

#: the folder of shipped demo weights (package data)
SHIPPED_WEIGHTS = Path(__file__).with_name("weights")
#: its manifest: ``{"files": {name: {"sha256": hex, "bytes": n}}, "command": how they were made}``
MANIFEST = SHIPPED_WEIGHTS / "manifest.json"


def read_manifest(folder: Path = SHIPPED_WEIGHTS) -> dict[str, dict[str, Any]]:
    """``{file name: {"sha256", "bytes"}}`` of the shipped weights in ``folder`` (empty if none)."""
    path = folder / MANIFEST.name
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text())["files"])


def cache_ready(path: Path, *, shipped: bool = True, folder: Path = SHIPPED_WEIGHTS) -> bool:
    """Whether the cached model file ``path`` is there; when it is not and ``shipped``, copy the
    shipped file of the same name into place first, if its SHA-256 matches the manifest."""
    if path.is_file():
        return True
    if not shipped:
        return False
    entry = read_manifest(folder).get(path.name)
    source = folder / path.name
    if entry is None or not source.is_file():
        return False
    digest = file_sha256(source)
    if digest != entry["sha256"]:
        logger.warning("shipped model %s has SHA-256 %s, not %s as its manifest says; training it instead",
                       source, digest, entry["sha256"])
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, path)  # atomic: a reader never sees half a file
    logger.info("using the shipped model %s (SHA-256 checked)", path.name)
    return True


def ship_files(paths: Iterable[Path], command: str, folder: Path = SHIPPED_WEIGHTS) -> dict[str, dict[str, Any]]:
    """Copy the trained model files ``paths`` into ``folder`` and write its manifest (replacing
    whatever was shipped before); returns the manifest's entries."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = sorted(set(paths), key=lambda p: p.name)
    keep = {p.name for p in paths}
    for old in folder.glob("*.safetensors"):
        if old.name not in keep:
            old.unlink()
    files = {}
    for p in paths:
        shutil.copyfile(p, folder / p.name)
        files[p.name] = {"sha256": file_sha256(p), "bytes": p.stat().st_size}
    (folder / MANIFEST.name).write_text(json.dumps({"command": command, "files": files}, indent=1) + "\n")
    return files

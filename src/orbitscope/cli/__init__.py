"""The ``orbitscope`` command line (typer)."""

from .commands import app, main

__all__ = ["app", "main"]

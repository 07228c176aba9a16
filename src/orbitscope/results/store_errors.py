"""What the store's files and catalog say when something goes wrong, in words a user can act on,
and the small file-system facts the store relies on (is a writer alive, sync a folder)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["pid_alive", "fsync_dir", "os_error_message", "describe_sqlite_error"]


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (temporary files name their writer)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def os_error_message(exc: OSError, where: Path) -> str:
    """An OSError while writing to a store, in words a user can act on."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk holding {where} is full ({exc.strerror}): free some space and run the same evaluation "
                "again; the chunks already written are kept and the run resumes after them")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"cannot write to {where} ({exc.strerror}): it is read-only or not yours; give a writable --home"
    return f"cannot write to {where}: {exc}"


def describe_sqlite_error(exc: BaseException, catalog: Path) -> str:
    """What an SQLite error means for a store, in words a user can act on."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return f"the catalog {catalog} is locked by another process (a long write?): try again in a moment"
    if "readonly" in text or "read-only" in text:
        return (f"the store {catalog.parent} is read-only (a read-only mount or another user's files): reading works, "
                "writing does not; copy the store, or give a writable --home")
    if "disk is full" in text or "database or disk is full" in text:
        return f"the disk holding {catalog.parent} is full: free some space and run the same command again"
    if "disk i/o" in text or "i/o error" in text:
        return f"an I/O error while using the catalog {catalog}: check the disk or file system ({exc})"
    if "unable to open" in text:
        return f"cannot open the catalog {catalog} ({exc}): check that the folder exists and can be read"
    return f"the catalog {catalog} is corrupt or not an orbitscope catalog: {exc}"

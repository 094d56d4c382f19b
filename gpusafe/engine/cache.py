"""The on-disk cache of instrumented modules.

A module is instrumented once and served from the cache after that.  The key
is a hash of everything the result depends on: the module's PTX, the kernel
filter, the instrumenter's own code and the device runtime it links in, so a
change to the pass or to the runtime can never be answered with a stale
result.  Each entry carries a digest of its contents and is checked when read:
a truncated or edited entry is a miss, never a result.  Entries are written to
a private temporary file and renamed into place, so a reader never sees half
an entry and nobody can plant a file where gpusafe will write.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import gpusafe_instrument as _instrument_package
from gpusafe_instrument.runtime import runtime_text
from gpusafe_instrument.sites import SiteTable

from .. import __version__

_SCHEMA = "gpusafe-cache/2"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/gpusafe/ptx`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpusafe" / "ptx"


def fingerprint(package: Path, runtime_ptx: str) -> str:
    """A hash of the instrumenter's source files under ``package`` and of the
    device runtime PTX it links into every module."""
    h = hashlib.sha256(f"{_SCHEMA}\0{__version__}\0".encode())
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(runtime_ptx.encode())
    return h.hexdigest()


@functools.cache
def instrumenter_fingerprint() -> str:
    """The fingerprint of the instrumenter this process runs."""
    return fingerprint(Path(_instrument_package.__file__).resolve().parent, runtime_text())


def entry_key(text: str, kernel_filter: str | None, every_offender: bool = False) -> str:
    h = hashlib.sha256(
        f"{instrumenter_fingerprint()}\0{kernel_filter}\0{every_offender}\0".encode())
    h.update(text.encode("utf-8", errors="surrogateescape"))
    return h.hexdigest()


def _digest(ptx: str, sites: str) -> str:
    return hashlib.sha256(ptx.encode("utf-8", errors="surrogateescape") + b"\0"
                          + sites.encode()).hexdigest()


def load(key: str) -> tuple[str, SiteTable] | None:
    """The cached (instrumented PTX, site table) for ``key``, or None."""
    path = cache_dir() / f"{key}.json"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, encoding="utf-8") as f:
            entry = json.load(f)
        ptx, sites = entry["ptx"], entry["sites"]
        if entry.get("key") != key or entry.get("digest") != _digest(ptx, sites):
            return None
        return ptx, SiteTable.from_json(sites)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(key: str, ptx: str, sites: SiteTable) -> None:
    """Write an entry; a cache that cannot be written only costs time."""
    directory = cache_dir()
    sites_json = sites.to_json()
    entry = {"key": key, "digest": _digest(ptx, sites_json), "ptx": ptx, "sites": sites_json}
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".entry-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f)
            os.replace(tmp, directory / f"{key}.json")
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass

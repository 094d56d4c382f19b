"""Compiled kernels on disk: optimised object code keyed by the kernel and the compiler.

Optimising and generating code costs a few hundred milliseconds per kernel
(more than a small launch runs for); a test suite launches the same kernels
in every process, so the object code the O3 pipeline emits is kept under
``$XDG_CACHE_HOME/gpusafe/jit/`` and linked into a fresh MCJIT engine on the
next run, which skips lowering, optimisation and code generation.

The key hashes everything the machine code depends on: the kernel's PTX
(name, parameters, body), the compiler's own source (``gpusafe/cpu/jit/*.py``,
hashed by the engine), llvmlite's and LLVM's versions, the target triple and
the host CPU with its features (the same cache directory may be shared by
machines of another kind).  An entry carries a digest of its bytes, checked
when read: a truncated or edited entry is a miss, never code.  Entries are
written to a private temporary file and renamed into place, as
``gpusafe.engine.cache`` does, so a reader never sees half an entry.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.binding as llvm

_SCHEMA = "gpusafe-jit-cache/1"


@dataclass
class DiskStats:
    """What the disk cache did in this process (tests and the bench read it)."""

    hits: int = 0
    misses: int = 0
    stores: int = 0


DISK = DiskStats()


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/gpusafe/jit`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpusafe" / "jit"


def enabled() -> bool:
    """``GPUSAFE_JIT_CACHE=0`` turns the disk cache off (the bench's cold runs)."""
    return os.environ.get("GPUSAFE_JIT_CACHE", "1") != "0"


@functools.cache
def _machine_id(triple: str) -> str:
    features = llvm.get_host_cpu_features().flatten()
    return "\0".join([_SCHEMA, llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)),
                      triple, llvm.get_host_cpu_name(), features])


def entry_key(compiler_hash: str, kernel_text: str, triple: str) -> str:
    """The key of a kernel: its PTX text, the compiler's source hash and the machine."""
    h = hashlib.sha256(f"{_machine_id(triple)}\0{compiler_hash}\0".encode())
    h.update(kernel_text.encode("utf-8", errors="surrogateescape"))
    return h.hexdigest()


def _digest(meta: str, code: bytes) -> str:
    return hashlib.sha256(meta.encode() + b"\0" + code).hexdigest()


def has(key: str) -> bool:
    """Whether an entry for ``key`` exists (not verified: :func:`load` does)."""
    return enabled() and (cache_dir() / f"{key}.o").is_file()


def load(key: str) -> tuple[bytes, dict] | None:
    """The cached (object code, metadata) for ``key``, or None."""
    if not enabled():
        return None
    path = cache_dir() / f"{key}.o"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            header = f.readline()
            code = f.read()
        entry = json.loads(header)
        meta = entry["meta"]
        if entry.get("key") != key or entry.get("digest") != _digest(meta, code):
            DISK.misses += 1
            return None
        DISK.hits += 1
        return code, json.loads(meta)
    except (OSError, ValueError, KeyError, TypeError):
        DISK.misses += 1
        return None


def store(key: str, code: bytes, meta: dict) -> None:
    """Write an entry; a cache that cannot be written only costs time."""
    if not enabled():
        return
    directory = cache_dir()
    meta_json = json.dumps(meta, sort_keys=True)
    header = json.dumps({"key": key, "digest": _digest(meta_json, code), "meta": meta_json})
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".entry-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header.encode() + b"\n" + code)
            os.replace(tmp, directory / f"{key}.o")
        except BaseException:
            os.unlink(tmp)
            raise
        DISK.stores += 1
    except OSError:
        pass


def object_code(ir: str, tm: Any) -> bytes:
    """The O3-optimised object code of an LLVM IR module (text)."""
    module = llvm.parse_assembly(ir)
    module.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(module, pb)
    return tm.emit_object(module)


def link(code: bytes, tm: Any) -> Any:
    """An MCJIT engine holding ``code`` (the same path for a fresh and a cached
    kernel, so the cached one runs exactly the code a fresh compile gives).

    The engine takes ownership of its target machine and destroys it with
    itself, so each engine gets its own: sharing ``tm`` would leave every
    other engine (and the next compile) with a freed one once a kernel's
    engine is collected."""
    own = llvm.Target.from_triple(tm.triple).create_target_machine(opt=3)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), own)
    engine.add_object_file(llvm.ObjectFileRef.from_data(code))
    engine.finalize_object()
    return engine

"""Serving a Cython extension module's C functions from Python: its
``__pyx_capi__`` capsules replaced by C trampolines that call Python.

A framework built with Cython (CuPy) calls the C functions of its own
modules through capsules that the calling module reads from the callee's
``__pyx_capi__`` when it is initialised.  Where the callee is linked against
what the CPU device cannot serve (CuPy's runtime module carries a statically
linked CUDA runtime), each capsule is replaced before any caller loads: a
small C function of the capsule's exact signature (generated from the
signature string Cython checks on import) takes the GIL, calls the Python
function given for it, and returns its result, or Cython's error value with
the Python exception set, which is how a Cython ``except?`` function fails.
The trampolines are compiled once per signature set with the machine's C
compiler into gpusafe's cache, like the stand-in driver.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .build import BuildError, _cache_root

_ARGS = {  # C parameter type -> (Py_BuildValue code, the C type it is passed as)
    "int": ("i", "int"), "cudaMemcpyKind": ("i", "int"), "unsigned int": ("I", "unsigned int"),
    "intptr_t": ("n", "Py_ssize_t"), "size_t": ("K", "unsigned long long"),
    "uintmax_t": ("K", "unsigned long long"), "PyObject *": ("O", "PyObject *"),
}
_RESULTS = {  # C return type -> the conversion from the Python result
    "int": "PyLong_AsLong", "unsigned int": "PyLong_AsUnsignedLong",
    "intptr_t": "PyLong_AsSsize_t", "size_t": "PyLong_AsSize_t",
    "uintmax_t": "PyLong_AsUnsignedLongLong", "float": "PyFloat_AsDouble",
}
_DECLARED = {"cudaMemcpyKind": "int"}  # a C enum, passed as its int
_SKIP = "int __pyx_skip_dispatch"


@dataclass(frozen=True)
class Signature:
    """A capsule's C signature, as far as a trampoline can take it."""

    result: str
    params: tuple[str, ...]  # C types, the cpdef dispatch flag included


def parse(text: str) -> Signature | None:
    """The signature Cython wrote in a capsule's name; None for a variable
    or a function passing a struct by value (no trampoline is made for
    those)."""
    m = re.fullmatch(r"(.+?)\s*\((.*)\)", text)
    if m is None:
        return None
    result, params = m.group(1).strip(), m.group(2).strip()
    if result.startswith("struct __pyx_obj_"):
        result = "PyObject *"
    if result != "PyObject *" and result not in _RESULTS:
        return None
    kinds = []
    for p in ([] if params in ("", "void") else [p.strip() for p in params.split(",")]):
        if p == _SKIP or p.startswith("struct __pyx_opt_args_"):
            kinds.append(p)
        elif p.startswith("struct __pyx_obj_"):
            kinds.append("PyObject *")
        elif p in _ARGS:
            kinds.append(p)
        else:
            return None
    return Signature(result, tuple(kinds))


def _trampoline(index: int, sig: Signature, error: int) -> str:
    params, codes, values = [], [], []
    for i, p in enumerate(sig.params):
        if p == _SKIP:
            params.append(f"int a{i}")
        elif p.startswith("struct __pyx_opt_args_"):  # the optional arguments, by address
            params.append(f"void *a{i}")
            codes.append("n")
            values.append(f"(Py_ssize_t)a{i}")
        else:
            code, ctype = _ARGS[p]
            params.append(f"{_DECLARED.get(p, p)} a{i}")
            codes.append(code)
            values.append(f"({ctype})a{i}")
    build = f'Py_BuildValue("({"".join(codes)})"{"".join(", " + v for v in values)})'
    head = f"{sig.result} gs_t{index}({', '.join(params) or 'void'})"
    call = f"PyObject *r = gs_run({index}, {build});"
    if sig.result == "PyObject *":
        return (f"{head} {{ PyGILState_STATE g = PyGILState_Ensure(); {call} "
                f"PyGILState_Release(g); return r; }}\n")
    return (f"{head} {{ PyGILState_STATE g = PyGILState_Ensure(); {call} "
            f"{sig.result} v = ({sig.result}){error}; "
            f"if (r) {{ v = ({sig.result}){_RESULTS[sig.result]}(r); Py_DECREF(r); }} "
            f"PyGILState_Release(g); return v; }}\n")


_PRELUDE = """#include <Python.h>
#include <stdint.h>
static PyObject *gs_impl[%d];
void gs_set(int i, PyObject *f) { Py_XINCREF(f); gs_impl[i] = f; }
static PyObject *gs_run(int i, PyObject *args) {
    if (args == NULL) return NULL;
    PyObject *r = PyObject_CallObject(gs_impl[i], args);
    Py_DECREF(args);
    return r;
}
"""


def source(entries: list[tuple[Signature, int]]) -> str:
    """The C of one trampoline per (signature, error value)."""
    return _PRELUDE % max(len(entries), 1) + "".join(
        _trampoline(i, sig, error) for i, (sig, error) in enumerate(entries))


def _build(text: str) -> ctypes.PyDLL:
    include = sysconfig.get_paths()["include"]
    key = hashlib.sha256((text + include).encode()).hexdigest()[:16]
    folder = _cache_root() / "capsules"
    lib = folder / f"{key}.so"
    if not lib.is_file():
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise BuildError("no C compiler (cc) to build gpusafe's CuPy runtime bridge")
        folder.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=folder))
        try:
            (work / "t.c").write_text(text)
            done = subprocess.run([compiler, "-shared", "-fPIC", "-O1", f"-I{include}", "-o",
                                   str(work / "t.so"), str(work / "t.c")],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise BuildError("building gpusafe's capsule trampolines failed:\n"
                                 + done.stderr[-4000:])
            os.replace(work / "t.so", lib)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return ctypes.PyDLL(str(lib))


_KEEP: list[Any] = []  # the libraries, capsule names and functions the capsules point into

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]


def replace(capi: dict[str, Any], served: dict[str, tuple[Callable[..., Any], int]]) -> list[str]:
    """Point the capsules named in ``served`` at their Python functions
    (each with the error value its Cython declaration names); the names
    whose signature no trampoline takes are returned, untouched."""
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    chosen: list[tuple[str, bytes, Signature, Callable[..., Any], int]] = []
    skipped = []
    for name, (function, error) in served.items():
        if name not in capi:
            continue
        text = get_name(capi[name])
        sig = parse(text.decode())
        if sig is None:
            skipped.append(name)
            continue
        chosen.append((name, text, sig, function, error))
    lib = _build(source([(sig, error) for _, _, sig, _, error in chosen]))
    lib.gs_set.argtypes = [ctypes.c_int, ctypes.py_object]
    _KEEP.append(lib)
    for i, (name, text, _, function, _) in enumerate(chosen):
        lib.gs_set(i, function)
        label = ctypes.create_string_buffer(text)
        _KEEP.extend([label, function])
        address = ctypes.cast(getattr(lib, f"gs_t{i}"), ctypes.c_void_p).value
        capi[name] = _new_capsule(address, ctypes.addressof(label), None)
    return skipped

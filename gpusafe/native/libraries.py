"""Libraries and kernels (``cuLibrary*``, ``cuKernel*``: CUDA 12's
context-independent loading, which the CUDA runtime and cuda.core use) served
as modules and functions of the current context.

The CPU device has one device and the program's modules live in its
contexts; a library is loaded as a module through the door (so it is
instrumented and its kernels checked like any module), and a kernel is the
function of that module: ``cuKernelGetFunction`` gives the same handle, which
is also what a launch of the kernel cast to ``CUfunction`` passes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as D

from .calls import (
    _OK,
    INVALID_VALUE,
    _func_get_name,
    _module_get_function,
    _module_get_global,
    _module_load,
    _module_load_data,
    _put,
    _put_i32,
)

_LIBRARY_OF: dict[int, int] = {}
"""kernel handle -> the library (module) it came from."""


def _library_get_kernel(out: int, library: int, name: int) -> int:
    err = _module_get_function(out, library, name)
    if err == 0 and out:
        _LIBRARY_OF[ctypes.c_uint64.from_address(out).value] = library
    return err


def _same_handle(out: int, handle: int) -> int:
    if not handle:
        return INVALID_VALUE
    _put(out, handle)
    return 0


def _kernel_get_library(out: int, kernel: int) -> int:
    if kernel not in _LIBRARY_OF:
        return INVALID_VALUE
    _put(out, _LIBRARY_OF[kernel])
    return 0


def _kernel_get_attribute(out: int, attrib: int, kernel: int, _dev: int) -> int:
    try:
        attribute = D.CUfunction_attribute(attrib)
    except ValueError:
        return INVALID_VALUE
    err, value = D.cuFuncGetAttribute(attribute, kernel)
    if err == _OK:
        _put_i32(out, value)
    return int(err)


def _kernel_set_attribute(attrib: int, value: int, kernel: int, _dev: int) -> int:
    try:
        attribute = D.CUfunction_attribute(attrib)
    except ValueError:
        return INVALID_VALUE
    return int(D.cuFuncSetAttribute(kernel, attribute, value)[0])


def _kernel_set_cache_config(kernel: int, config: int, _dev: int) -> int:
    try:
        cache = D.CUfunc_cache(config)
    except ValueError:
        return INVALID_VALUE
    return int(D.cuFuncSetCacheConfig(kernel, cache)[0])


def _kernel_get_param_info(kernel: int, index: int, offset: int, size: int) -> int:
    err, o, s = D.cuFuncGetParamInfo(kernel, index)
    if err == _OK:
        _put(offset, int(o))
        _put(size, int(s))
    return int(err)


def _library_unload(library: int) -> int:
    for kernel in [k for k, lib in _LIBRARY_OF.items() if lib == library]:
        del _LIBRARY_OF[kernel]
    return int(D.cuModuleUnload(library)[0])


def _kernel_count(out: int, library: int) -> int:
    err, n = D.cuModuleGetFunctionCount(library)
    if err == _OK:
        ctypes.c_uint32.from_address(out).value = int(n)
    return int(err)


CALLS: dict[str, Callable[..., Any]] = {
    "cuLibraryLoadData": _module_load_data,
    "cuLibraryLoadFromFile": _module_load,
    "cuLibraryUnload": _library_unload,
    "cuLibraryGetKernel": _library_get_kernel,
    "cuLibraryGetModule": _same_handle,
    "cuLibraryGetGlobal": _module_get_global,
    "cuLibraryGetKernelCount": _kernel_count,
    "cuKernelGetFunction": _same_handle,
    "cuKernelGetLibrary": _kernel_get_library,
    "cuKernelGetName": _func_get_name,
    "cuKernelGetAttribute": _kernel_get_attribute,
    "cuKernelSetAttribute": _kernel_set_attribute,
    "cuKernelSetCacheConfig": _kernel_set_cache_config,
    "cuKernelGetParamInfo": _kernel_get_param_info,
}
"""The library calls by base name, merged with :data:`.calls.CALLS`."""

"""Kernel functions and their attributes (``cuFunc*``, occupancy).

``NUM_REGS``, ``LOCAL_SIZE_BYTES``, ``SHARED_SIZE_BYTES`` and
``MAX_THREADS_PER_BLOCK`` come from the PTX (``KernelLayout``);
``CONST_SIZE_BYTES`` is 0 (not tracked); register counts do not limit
launches (no ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``).
"""

from __future__ import annotations

from typing import Any

from cuda.bindings.driver import CUfunc_cache, CUfunction, CUfunction_attribute, CUmodule

from ...cudaapi import args as _args
from .. import driver_profile as _profile
from .api import api
from .state import DriverBase, E, Fail, Function


def max_threads(fn: Function) -> int:
    """Most threads per block a launch of ``fn`` may have."""
    mt = int(fn.info.max_threads or 0)
    return min(mt, _profile.MAX_THREADS_PER_BLOCK) if mt > 0 else _profile.MAX_THREADS_PER_BLOCK


def occupancy(fn: Function, block_size: int, dynamic_shared: int) -> int:
    """Blocks of ``block_size`` threads of ``fn`` one multiprocessor holds at
    once: what ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` reports, and,
    times the multiprocessor count, the largest cooperative grid."""
    if block_size > max_threads(fn):
        return 0
    attrs = _profile.DEVICE_ATTRIBUTES
    warps = -(-block_size // _profile.WARP_SIZE)
    by_threads = attrs["MAX_THREADS_PER_MULTIPROCESSOR"] // (warps * _profile.WARP_SIZE)
    smem = int(fn.info.static_shared or 0) + dynamic_shared
    if smem:
        smem += attrs["RESERVED_SHARED_MEMORY_PER_BLOCK"]
        by_smem = attrs["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"] // smem
    else:
        by_smem = attrs["MAX_BLOCKS_PER_MULTIPROCESSOR"]
    return int(min(by_threads, by_smem, attrs["MAX_BLOCKS_PER_MULTIPROCESSOR"]))


class FunctionCalls(DriverBase):
    def _function(self, hfunc: Any) -> Function:
        h = _args.handle_value(hfunc, CUfunction)
        self._require_init()
        fn = self._lookup(h, Function, E.CUDA_ERROR_INVALID_HANDLE, "function")
        self._check_ctx(fn.module.ctx)
        return fn

    @api(1)
    def cuFuncGetAttribute(self, attrib: Any, hfunc: Any) -> int:
        attrib = _args.require_enum(attrib, CUfunction_attribute, "attrib")
        fn = self._function(hfunc)
        info = fn.info
        a = attrib.name[len("CU_FUNC_ATTRIBUTE_"):]
        values = {
            "MAX_THREADS_PER_BLOCK": max_threads(fn),
            "SHARED_SIZE_BYTES": int(info.static_shared or 0),
            "CONST_SIZE_BYTES": 0,
            "LOCAL_SIZE_BYTES": int(info.local_size or 0),
            "NUM_REGS": int(info.num_regs or 0),
            "PTX_VERSION": fn.module.ptx_version[0] * 10 + fn.module.ptx_version[1],
            "BINARY_VERSION": _profile.CC_MAJOR * 10 + _profile.CC_MINOR,
            "CACHE_MODE_CA": 0,
            "MAX_DYNAMIC_SHARED_SIZE_BYTES": fn.max_dynamic_shared,
            "PREFERRED_SHARED_MEMORY_CARVEOUT": fn.carveout,
            "CLUSTER_SIZE_MUST_BE_SET": 0,
            "REQUIRED_CLUSTER_WIDTH": 0,
            "REQUIRED_CLUSTER_HEIGHT": 0,
            "REQUIRED_CLUSTER_DEPTH": 0,
            "NON_PORTABLE_CLUSTER_SIZE_ALLOWED": 0,
            "CLUSTER_SCHEDULING_POLICY_PREFERENCE": 0,
        }
        if a not in values:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{attrib.name} is not a function attribute")
        return values[a]

    @api(0)
    def cuFuncSetAttribute(self, hfunc: Any, attrib: Any, value: Any) -> None:
        attrib = _args.require_enum(attrib, CUfunction_attribute, "attrib")
        v = _args.c_int(value, "int", "value")
        fn = self._function(hfunc)
        if attrib == CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            static = int(fn.info.static_shared or 0)
            if v < 0 or v + static > _profile.OPTIN_SHARED_PER_BLOCK:
                raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                           f"{v} bytes of dynamic shared memory + {static} static exceed the "
                           f"device's {_profile.OPTIN_SHARED_PER_BLOCK}")
            fn.max_dynamic_shared = v
        elif attrib == CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
            if not (v == -1 or 0 <= v <= 100):
                raise Fail(E.CUDA_ERROR_INVALID_VALUE, "the carveout is a percentage or -1")
            fn.carveout = v
        else:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"{attrib.name} cannot be set")

    @api(0)
    def cuFuncSetCacheConfig(self, hfunc: Any, config: Any) -> None:
        config = _args.require_enum(config, CUfunc_cache, "config")
        self._function(hfunc).cache_config = config

    @api(1)
    def cuFuncGetName(self, hfunc: Any) -> bytes:
        return self._function(hfunc).name.encode()

    @api(1)
    def cuFuncGetModule(self, hfunc: Any) -> CUmodule:
        return CUmodule(self._function(hfunc).module.handle)

    @api(2)
    def cuFuncGetParamInfo(self, func: Any, paramIndex: Any) -> tuple[int, int]:
        i = _args.c_int(paramIndex, "size_t", "paramIndex")
        fn = self._function(func)
        params = fn.info.params
        if i >= len(params):
            raise Fail(E.CUDA_ERROR_INVALID_VALUE,
                       f"{fn.name} has {len(params)} parameters, index {i} asked for")
        return int(params[i].offset), int(params[i].size)

    @api(1)
    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, func: Any, blockSize: Any,
                                                    dynamicSMemSize: Any) -> int:
        bs = _args.c_int(blockSize, "int", "blockSize")
        dyn = _args.c_int(dynamicSMemSize, "size_t", "dynamicSMemSize")
        fn = self._function(func)
        if bs <= 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "blockSize must be positive")
        return occupancy(fn, bs, dyn)

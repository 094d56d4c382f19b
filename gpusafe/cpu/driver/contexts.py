"""Contexts (``cuCtx*``), each device's primary context
(``cuDevicePrimaryCtx*``) and peer access between contexts of different
devices (``cuCtx{Enable,Disable}PeerAccess``): each thread's context stack,
flags and limits.

A context belongs to one device and owns the allocations, modules, streams
and events made in it; destroying it (or resetting the primary context)
frees them and discards its sticky error.  Peer access is kept per context,
by the peer's device: a kernel of a context reaches the memory of its own
device and of the devices it enabled peer access to; another device's
memory faults (``CUDA_ERROR_ILLEGAL_ADDRESS``), as on GPUs sharing one
unified address space.  Destroying the peer context ends the access.
"""

from __future__ import annotations

import inspect
from typing import Any

from cuda.bindings.driver import CUcontext, CUctx_flags, CUctxCreateParams, CUdevice, CUlimit

from ...cudaapi import args as _args
from .api import api
from .state import Context, DriverBase, E, Fail, device_ordinal

_CTX_FLAGS_MASK = int(CUctx_flags.CU_CTX_FLAGS_MASK)
_CTX_SCHED_MASK = int(CUctx_flags.CU_CTX_SCHED_MASK)
_CREATE_PARAMS = ("ctxCreateParams", "flags", "dev")


def _check_ctx_flags(flags: int) -> None:
    if flags & ~_CTX_FLAGS_MASK:
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, f"unknown context flags {flags:#x}")
    sched = flags & _CTX_SCHED_MASK
    if sched not in (0, 1, 2, 4):
        raise Fail(E.CUDA_ERROR_INVALID_VALUE, "more than one scheduling flag is set")


def _bind_create_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """cuCtxCreate's arguments by name: cuda-python 13 ``(ctxCreateParams,
    flags, dev)``, or 12.x's ``(flags, dev)``, positionally or by keyword."""
    given = len(args) + len(kwargs)
    if given == 2 and "ctxCreateParams" not in kwargs:
        names: tuple[str, ...] = ("flags", "dev")
        bound: dict[str, Any] = {"ctxCreateParams": None}
    elif given == 3:
        names, bound = _CREATE_PARAMS, {}
    else:
        raise TypeError(f"cuCtxCreate() takes 3 arguments (ctxCreateParams, flags, dev) or, as "
                        f"in cuda-python 12.x, 2 (flags, dev); {given} given")
    bound.update(zip(names, args, strict=False))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            raise TypeError(f"cuCtxCreate() got an unexpected or repeated keyword argument '{k}'")
        bound[k] = v
    return bound


def _has_cig(params: CUctxCreateParams) -> bool:
    cig = params.cigParams  # a NULL pointer reads as an empty list
    return bool(cig) if isinstance(cig, list) else cig is not None


class ContextCalls(DriverBase):
    @api(1)
    def cuCtxCreate(self, *args: Any, **kwargs: Any) -> CUcontext:
        """Both signatures: cuda-python 13 ``(ctxCreateParams, flags, dev)`` and
        12.x ``(flags, dev)``."""
        bound = _bind_create_args(args, kwargs)
        params = bound["ctxCreateParams"]
        if params is not None:
            _args.require_struct(params, CUctxCreateParams, "ctxCreateParams")
        flags = _args.c_int(bound["flags"], "unsigned int", "flags")
        d = device_ordinal(bound["dev"])
        self._require_init()
        self._check_device(d)
        _check_ctx_flags(flags)
        if params is not None and (int(params.numExecAffinityParams) != 0 or _has_cig(params)):
            raise Fail(E.CUDA_ERROR_NOT_SUPPORTED,
                       "execution affinity and CIG contexts are not supported by the CPU device")
        ctx = self._new_context(flags, primary=False, device=d)
        self._stack().append(ctx)
        return CUcontext(ctx.handle)

    # the names cuda-python 13 gives the parameters (the 12.x form is positional)
    cuCtxCreate.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
         for n in ("self", *_CREATE_PARAMS)])

    @api(0)
    def cuCtxDestroy(self, ctx: Any) -> None:
        h = _args.handle_value(ctx, CUcontext)
        self._require_init()
        obj = self._handles.get(h)
        if not isinstance(obj, Context) or not obj.alive:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT, f"context {h:#x} is not a valid context")
        if obj.primary:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT,
                       "a primary context is released with cuDevicePrimaryCtxRelease, "
                       "not destroyed")
        self._destroy_context(obj)

    @api(0)
    def cuCtxSynchronize(self) -> None:
        self._current()

    @api(1)
    def cuCtxGetCurrent(self) -> CUcontext:
        self._require_init()
        st = self._stack()
        return CUcontext(st[-1].handle if st else 0)

    @api(0)
    def cuCtxSetCurrent(self, ctx: Any) -> None:
        h = _args.handle_value(ctx, CUcontext)
        self._require_init()
        st = self._stack()
        if h == 0:
            if st:
                st.pop()
            return
        obj = self._ctx_arg(h)
        if st:
            st[-1] = obj
        else:
            st.append(obj)

    @api(0)
    def cuCtxPushCurrent(self, ctx: Any) -> None:
        h = _args.handle_value(ctx, CUcontext)
        self._require_init()
        self._stack().append(self._ctx_arg(h))

    @api(1)
    def cuCtxPopCurrent(self) -> CUcontext:
        self._require_init()
        st = self._stack()
        if not st:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT, "the calling thread has no current context")
        return CUcontext(st.pop().handle)

    @api(1)
    def cuCtxGetDevice(self) -> CUdevice:
        return CUdevice(self._current(check=False).device)

    @api(1)
    def cuCtxGetFlags(self) -> int:
        return self._current(check=False).flags

    @api(1)
    def cuCtxGetApiVersion(self, ctx: Any) -> int:
        h = _args.handle_value(ctx, CUcontext)
        self._require_init()
        if h == 0:
            self._current(check=False)
        else:
            self._ctx_arg(h)
        return 3020

    @api(1)
    def cuCtxGetLimit(self, limit: Any) -> int:
        limit = _args.require_enum(limit, CUlimit, "limit")
        ctx = self._current(check=False)
        if limit.name not in ctx.limits:
            raise Fail(E.CUDA_ERROR_UNSUPPORTED_LIMIT, f"{limit.name} is not supported")
        return ctx.limits[limit.name]

    @api(0)
    def cuCtxSetLimit(self, limit: Any, value: Any) -> None:
        limit = _args.require_enum(limit, CUlimit, "limit")
        v = _args.c_int(value, "size_t", "value")
        ctx = self._current()
        if limit.name not in ctx.limits:
            raise Fail(E.CUDA_ERROR_UNSUPPORTED_LIMIT, f"{limit.name} is not supported")
        ctx.limits[limit.name] = v

    @api(2)
    def cuCtxGetStreamPriorityRange(self) -> tuple[int, int]:
        self._current(check=False)
        return 0, 0

    # -- the primary context ----------------------------------------------------

    @api(1)
    def cuDevicePrimaryCtxRetain(self, dev: Any) -> CUcontext:
        d = device_ordinal(dev)
        self._require_init()
        self._check_device(d)
        primary = self._primary.get(d)
        if primary is None or not primary.alive:
            primary = self._primary[d] = self._new_context(self._primary_flags[d], primary=True,
                                                           device=d)
        self._primary_refcount[d] += 1
        return CUcontext(primary.handle)

    @api(0)
    def cuDevicePrimaryCtxRelease(self, dev: Any) -> None:
        d = device_ordinal(dev)
        self._require_init()
        self._check_device(d)
        if self._primary_refcount[d] <= 0 or d not in self._primary:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT, "the primary context is not retained")
        self._primary_refcount[d] -= 1
        if self._primary_refcount[d] == 0:
            self._destroy_context(self._primary.pop(d))

    @api(0)
    def cuDevicePrimaryCtxReset(self, dev: Any) -> None:
        d = device_ordinal(dev)
        self._require_init()
        self._check_device(d)
        primary = self._primary.get(d)
        if primary is not None and primary.alive:
            # the handle the program holds stays usable (and current where it was
            # current): a fresh context under the same handle
            fresh = Context(primary.handle, self._primary_flags[d], primary=True, device=d)
            self._destroy_context(primary, replacement=fresh)
            self._handles[fresh.handle] = fresh
            self._primary[d] = fresh

    @api(2)
    def cuDevicePrimaryCtxGetState(self, dev: Any) -> tuple[int, int]:
        d = device_ordinal(dev)
        self._require_init()
        self._check_device(d)
        primary = self._primary.get(d)
        active = int(primary is not None and primary.alive and self._primary_refcount[d] > 0)
        return self._primary_flags[d], active

    @api(0)
    def cuDevicePrimaryCtxSetFlags(self, dev: Any, flags: Any) -> None:
        d = device_ordinal(dev)
        f = _args.c_int(flags, "unsigned int", "flags")
        self._require_init()
        self._check_device(d)
        _check_ctx_flags(f)
        self._primary_flags[d] = f
        if d in self._primary:
            self._primary[d].flags = f

    # -- peer access ------------------------------------------------------------

    def _peer_arg(self, peerContext: Any) -> tuple[Context, Context]:
        """The current context and the peer context, as both calls check them."""
        h = _args.handle_value(peerContext, CUcontext)
        ctx = self._current()
        obj = self._handles.get(h)
        if not isinstance(obj, Context) or not obj.alive:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT,
                       f"peer context {h:#x} is not a valid context")
        if obj is ctx:
            raise Fail(E.CUDA_ERROR_INVALID_CONTEXT, "the peer context is the current context")
        return ctx, obj

    @api(0)
    def cuCtxEnablePeerAccess(self, peerContext: Any, Flags: Any) -> None:
        flags = _args.c_int(Flags, "unsigned int", "Flags")
        ctx, peer = self._peer_arg(peerContext)
        if flags != 0:
            raise Fail(E.CUDA_ERROR_INVALID_VALUE, "cuCtxEnablePeerAccess flags must be 0")
        if peer.device == ctx.device:
            raise Fail(E.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                       f"both contexts are on device {ctx.device}: peer access links two "
                       "different devices (cuDeviceCanAccessPeer is 0)")
        known = ctx.peers.get(peer.device)
        if known is not None and known.alive:
            raise Fail(E.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
                       f"peer access from device {ctx.device} to device {peer.device} is "
                       "already enabled")
        ctx.peers[peer.device] = peer

    @api(0)
    def cuCtxDisablePeerAccess(self, peerContext: Any) -> None:
        ctx, peer = self._peer_arg(peerContext)
        if ctx.peers.get(peer.device) is not peer:
            raise Fail(E.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
                       f"peer access from this context to device {peer.device}'s context "
                       "has not been enabled")
        del ctx.peers[peer.device]

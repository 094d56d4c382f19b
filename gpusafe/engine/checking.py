"""The engine: one per checked process, whatever door the program came in by.

A door translates each intercepted call into the questions and events below
and acts on the answers; the engine holds the policy.  It owns the
allocation registry (red zones, quarantine, contexts, host verdicts), the
modules (instrumentation), the launch pipeline and the launches in flight,
and hands what it finds to :class:`~gpusafe.engine.findings.Findings`.  It
talks to the device only through the backend's driver API, unwrapped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cuda.bindings.driver import CUmodule, CUresult

from gpusafe_instrument import host, layout

from ..cudaapi import args as cuda_args
from ..cudaapi.params import ParamError, PointerArray, pack
from .callsite import CallSite
from .findings import Findings, FreedArgument, heap_allocation
from .launches import DeviceMemoryError, DriverMemory, Launch, LaunchPipeline, MappedHostMemory
from .modules import LoadPlan, ModuleInfo, Modules
from .registry import (
    DEFAULT_PADDING,
    DEFAULT_QUARANTINE,
    FreeResult,
    Registry,
    State,
    leak_verdicts,
)

_FAULTS = frozenset({
    CUresult.CUDA_ERROR_ASSERT, CUresult.CUDA_ERROR_LAUNCH_FAILED,
    CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, CUresult.CUDA_ERROR_MISALIGNED_ADDRESS,
    CUresult.CUDA_ERROR_ILLEGAL_INSTRUCTION, CUresult.CUDA_ERROR_INVALID_PC,
    CUresult.CUDA_ERROR_HARDWARE_STACK_ERROR, CUresult.CUDA_ERROR_LAUNCH_TIMEOUT,
    CUresult.CUDA_ERROR_INVALID_ADDRESS_SPACE,
})
"""Launch results that mean the kernel started and did not finish."""

GRID_WORKSPACE_SIZE = 8
"""Bytes of a cooperative launch's grid workspace (``cooperative_groups::
details::grid_workspace``: its size and the barrier word)."""
GRID_WORKSPACE_TAG = layout.HEAP_TAG_BASE - 1
"""The allocation-table tag of the grid workspace: no registry tag reaches it
and no heap tag is below it, so it never names a program's allocation."""


@dataclass(frozen=True)
class Policy:
    """What the user chose on the command line that the engine applies."""

    padding: int = DEFAULT_PADDING
    quarantine: int = DEFAULT_QUARANTINE
    leak_check: bool = False
    kernel_filter: str | None = None
    every_offender: bool = False  # records for every failing access, not site tallies


class Engine:
    def __init__(self, backend: Any, findings: Findings, policy: Policy = Policy()) -> None:
        self.backend = backend
        self.driver = backend.driver  # the backend's own functions, never the wrapped ones
        self.E = CUresult
        self.findings = findings
        self.policy = policy
        self.registry = Registry(policy.padding, policy.quarantine)
        self.modules = Modules(policy.kernel_filter, policy.every_offender)
        if backend.record_memory is not None:  # one memory, outside every context
            self.pipeline = LaunchPipeline(backend.record_memory)
        else:  # the violation records outside the context, so that a fault keeps them
            self.pipeline = LaunchPipeline(DriverMemory(self.driver),
                                           records=MappedHostMemory(self.driver))
        self._outlives_contexts = backend.record_memory is not None
        self._pending: list[Launch] = []
        self._lock = threading.RLock()
        self._heap_lost = 0  # in-kernel mallocs reported as unrecorded so far

    # -- allocations ---------------------------------------------------------

    def current_context(self) -> int:
        err, ctx = self.driver.cuCtxGetCurrent()
        return int(ctx) if err == self.E.CUDA_SUCCESS and ctx is not None else 0

    def reserve_size(self, size: int) -> int:
        return self.registry.reserve_size(size)

    @property
    def padding(self) -> int:
        return self.registry.padding

    def allocated(self, api: str, base: int, size: int, site: CallSite | None) -> None:
        context = self.current_context()
        with self._lock:
            self.registry.allocated(base, size, api, site, context)

    def mapped(self, api: str, base: int, size: int, site: CallSite | None) -> None:
        """Memory a kernel may reach that the program cannot free with
        ``cuMemFree`` (pinned host memory, a module's global variable)."""
        context = self.current_context()
        with self._lock:
            self.registry.mapped(base, size, api, site, context)

    def unmapped(self, bases: list[int], site: str | None = None) -> None:
        with self._lock:
            self.registry.unmapped(bases, site)

    def free(self, api: str, address: int, site: CallSite | None) -> FreeResult:
        """Judge a free; a bad one is reported here, and the caller refuses it."""
        with self._lock:
            verdict = self.registry.free(address, api, site)
        if verdict.violation is not None:
            self.findings.host_violation(verdict.violation)
        return verdict

    def host_memory_gone(self, pointer: Any, site: str | None) -> None:
        """``cuMemFreeHost``/``cudaFreeHost`` of ``pointer``: an address or a
        host buffer object, as cuda-python takes it."""
        self.unmapped([cuda_args.host_pointer(pointer).address], site)

    def range_unmapped(self, api: str, address: int, size: int,
                       site: str | None) -> list[int]:
        """``cuMemUnmap`` took back every mapping in ``[address, +size)``: each
        is freed (a later access through it is a use after free).  Returns the
        bases the quarantine now lets the driver really free."""
        release: list[int] = []
        with self._lock:
            mapped = [a.base for a in self.registry.table()
                      if address <= a.base < address + size and a.state is State.LIVE]
            for base in mapped:
                release += self.registry.free(base, api, site).release
        return [b for b in release if b not in mapped]

    def ranges_ok(self, api: str, ranges: list[tuple[int | None, int]],
                  site: Callable[[], CallSite | None]) -> bool:
        """Whether every device range a copy or memset touches lies inside one
        live allocation; a bad one is reported.  Ranges in memory gpusafe does
        not track (host memory, the driver's own) pass."""
        reg = self.registry
        for where, size in ranges:
            with self._lock:
                if where is None or (reg.find(where) is None and reg.nearest(where) is None):
                    continue
                v = reg.check_range(where, size, api, site())
            if v is not None:
                self.findings.host_violation(v)
                return False
        return True

    def address_range(self, address: int) -> tuple[int, int] | None:
        """The (base, size) of the allocation holding ``address`` as the
        program sees it (without the red zone), if gpusafe made it."""
        with self._lock:
            alloc = self.registry.find(address)
        if alloc is None or alloc.state is not State.LIVE:
            return None
        return alloc.base, alloc.size

    # -- contexts ------------------------------------------------------------

    def context_ending(self) -> None:
        """Before a context may go away: finish its launches, and drop what
        of gpusafe's own lives in it (records kept outside every context
        stay)."""
        self.drain()
        if not self._outlives_contexts:
            self.pipeline.forget_table()

    def context_destroyed(self, context: int) -> None:
        """The driver destroyed ``context`` and reclaimed its memory."""
        with self._lock:
            left = self.registry.context_destroyed(context)
        if self.policy.leak_check:
            for leak in leak_verdicts(left):
                self.findings.host_violation(leak)

    def primary_context(self, device: Any) -> int | None:
        """The handle of ``device``'s primary context if it is active (asking
        does not create it)."""
        d = self.driver
        try:
            err, _flags, active = d.cuDevicePrimaryCtxGetState(device)
            if err != self.E.CUDA_SUCCESS or not active:
                return None
            err, ctx = d.cuDevicePrimaryCtxRetain(device)
            if err != self.E.CUDA_SUCCESS:
                return None
            d.cuDevicePrimaryCtxRelease(device)
            return int(ctx)
        except (AttributeError, TypeError):
            return None

    # -- modules -------------------------------------------------------------

    def kernel_source(self, name: str, text: str, site: CallSite | None) -> None:
        """The program handed ``text`` to NVRTC as the source named ``name``."""
        self.findings.sources.captured(name, text, site)

    def plan_module(self, image: Any, site: CallSite | None) -> LoadPlan:
        """What to load for ``image``.  gpusafe's own failure here is never
        the program's: the module is loaded as it is, runs unchecked, and the
        run ends as a tool failure."""
        try:
            plan = self.modules.plan(image)
        except Exception as e:  # noqa: BLE001 - an internal error, reported as such
            reason = f"internal error of gpusafe: {type(e).__name__}: {e}"
            self.findings.problem(f"could not instrument a module loaded at "
                                  f"{site or 'an unknown site'}: {reason}")
            return LoadPlan(image, ModuleInfo(None, reason))
        if plan.problem is not None:
            self.findings.problem(f"could not instrument a module loaded at "
                                  f"{site or 'an unknown site'}: {plan.problem}")
        return plan

    def module_loaded(self, handle: int, plan: LoadPlan) -> None:
        self.modules.loaded(handle, plan.info)

    def function_found(self, module: int, name: str, function: int) -> None:
        """The program got ``function`` (kernel ``name`` of ``module``); a
        kernel with a launch proof gets its proven entry's handle too."""
        self.modules.function_found(module, name, function)
        info = self.modules.module(module)
        kernel = None if info is None or info.sites is None else info.sites.kernels.get(name)
        if kernel is not None and kernel.proof is not None:
            result = self.driver.cuModuleGetFunction(CUmodule(module),
                                                     kernel.proven_entry.encode())
            if result[0] == CUresult.CUDA_SUCCESS:
                self.modules.proven_found(function, result[1])

    def global_taken(self, module: int, base: int, size: int, site: CallSite | None) -> None:
        """A module global whose address the program takes may reach a kernel."""
        self.mapped("cuModuleGetGlobal", base, size, site)
        info = self.modules.module(module)
        if info is not None:
            info.globals.append(base)

    def module_unloaded(self, module: int) -> None:
        info = self.modules.unloaded(module)
        if info is not None:
            self.registry.unmapped(info.globals)

    # -- launches ------------------------------------------------------------

    def function_name(self, function: Any) -> str:
        try:
            err, name = self.driver.cuFuncGetName(function)
            if err == self.E.CUDA_SUCCESS:
                return name.decode() if isinstance(name, bytes) else str(name)
        except (AttributeError, TypeError):
            pass
        return f"<function {int(function):#x}>"

    def launch(self, function: Any, shared: int, kernel_params: Any, extra: Any,
               perform: Callable[[Any, Any], tuple], site: Callable[[], CallSite | None],
               cooperative: str = "", dims: tuple[Any, Any] | None = None) -> tuple:
        """One launch of ``function``: ``perform(kernelParams, extra)`` launches
        it with what this decides, the program's own arguments for a kernel
        that runs unchecked, the instrumented kernel's for one that is
        checked.  A cooperative launch (``cooperative``: the call's name)
        has the backend's grid workspace in its allocation table
        (``grid.sync()`` counts arrivals in it); where the backend cannot say
        where that is, a checked kernel's cooperative launch is refused and
        reported as unimplemented: with the workspace unknown its checks
        would stop ``grid.sync()`` itself.  ``dims``: the grid and block
        dimensions, for a kernel with a launch proof
        (``gpusafe_instrument/checks/launch_proof.py``): when the launch is
        proven, ``perform(kernelParams, extra, function)`` launches the
        kernel's proven entry ``function`` instead (a door passing ``dims``
        takes that third argument)."""
        entry = self.modules.kernel(int(function))
        if entry is None:
            self.findings.report.record_unchecked(
                self.function_name(function),
                "loaded through an API gpusafe does not interpose "
                "(cuLibraryLoadData, cuModuleLoadFatBinary, ...)")
            return perform(kernel_params, extra)
        module, name = entry
        info, why = self.modules.checked_kernel(module, name)
        if info is None:
            self.findings.report.record_unchecked(
                name, why, requested=self.modules.filtered_out(module, name))
            return perform(kernel_params, extra)
        try:
            end = max((offset + size for _, offset, size in info.params), default=0)
            params = pack(name, info.params, end, cuda_args.convert_kernel_params(kernel_params),
                          int(extra or 0))
        except ParamError:
            return (self.E.CUDA_ERROR_INVALID_VALUE,)
        records = self._records()
        table_key: tuple = (self.registry.version, self.current_context())
        if cooperative:
            workspace = self.backend.grid_workspace()
            if workspace is None:
                where = site()
                self.findings.unimplemented(
                    cooperative, None if where is None else str(where),
                    f"a cooperative launch of checked kernel {name}: gpusafe does not know "
                    "where this backend keeps the grid workspace grid.sync() uses")
                return (self.E.CUDA_ERROR_NOT_SUPPORTED,)
            records.append(host.AllocationRecord(GRID_WORKSPACE_TAG, workspace,
                                                 GRID_WORKSPACE_SIZE))
            table_key += (workspace,)
        launch_site = site()
        freed = self._freed_arguments(info, params, launch_site)
        launch_dims = _dimensions(dims)
        with self._lock:
            try:
                launch = self.pipeline.prepare(
                    module.sites, name, params, records, table_key=table_key,
                    dynamic_shared=int(shared), heap_key=self.current_context(),
                    grid=None if launch_dims is None else launch_dims[0],
                    block=None if launch_dims is None else launch_dims[1])
            except DeviceMemoryError as e:
                self.findings.freed_arguments(name, freed)
                self.findings.problem(str(e))
                return (self.E.CUDA_ERROR_OUT_OF_MEMORY,)
            except Exception as e:  # noqa: BLE001 - an internal error, reported as such
                self.findings.problem(f"{name} ran unchecked after an internal error of "
                                      f"gpusafe: {type(e).__name__}: {e}")
                self.findings.report.record_unchecked(name, "internal error of gpusafe")
                self.findings.freed_arguments(name, freed)
                return perform(kernel_params, extra)
            offsets = [offset for _, offset, _ in info.params] + list(info.hidden_offsets)
            array = PointerArray(launch.params, offsets)
            proven = self.modules.proven(int(function)) if launch.entry != name else None
            if proven is not None:
                # the host proved every access in bounds: the same arguments to
                # the kernel's proven entry, which has no checks
                result = perform(array.address, 0, proven)
            else:
                result = perform(array.address, 0)
            del array
            launch.site, launch.freed_arguments = launch_site, freed
            if result[0] != self.E.CUDA_SUCCESS:
                self._failed(launch, result[0])
                return result
            self.findings.report.record_launch(name)
            self._pending.append(launch)
        if self.backend.synchronous:
            self.drain()  # the launch has finished already
        return result

    def graph_kernel_params(self, function: Any, kernel_params: Any,
                            extra: Any) -> PointerArray | None:
        """A graph kernel node's arguments copied now (as the driver copies
        them at add time), as a ``void*`` array laid out for the instrumented
        kernel (its hidden slots, the launch context and the check slots'
        limits, placeholders that :meth:`launch` replaces at each launch);
        None for a kernel that runs unchecked."""
        entry = self.modules.kernel(int(function))
        if entry is None:
            return None
        info, _ = self.modules.checked_kernel(*entry)
        if info is None:
            return None
        end = max((offset + size for _, offset, size in info.params), default=0)
        params = pack(entry[1], info.params, end, cuda_args.convert_kernel_params(kernel_params),
                      int(extra or 0))
        buffer = params.ljust(max(end, info.param_buffer_size), b"\0")
        return PointerArray(buffer, [offset for _, offset, _ in info.params]
                            + list(info.hidden_offsets))

    def _failed(self, launch: Launch, error: Any) -> None:
        """A launch that did not run, or ended in a device fault: what it
        recorded before the fault is still reported, and so is the fault."""
        records, dropped = self.pipeline.collect(launch)
        self._found(launch, records, dropped)
        if error in _FAULTS:
            detail = (self.backend.fault_detail() or "").removeprefix(f"{error.name}: ")
            self.findings.report.record_fault(launch.kernel, error.name, detail)
            if error == CUresult.CUDA_ERROR_LAUNCH_TIMEOUT:
                self.findings.problem(f"kernel {launch.kernel} never finished and was stopped "
                                      f"({detail or 'kernel timeout'}): it was not checked "
                                      "to its end")
        self.findings.changed()

    def _freed_arguments(self, info: host.KernelInfo, params: bytes,
                         site: CallSite | None) -> list[FreedArgument]:
        """Pointer arguments into freed memory: a use after free before the
        kernel runs, reported once the launch's records say whether the
        kernel went through them (:meth:`Findings.device_records`)."""
        freed = []
        for root, value in zip(info.roots, host.root_values(info, params), strict=True):
            with self._lock:
                v = self.registry.check_argument(value, "cuLaunchKernel", site)
            if v is not None and all(f.verdict.allocation is not v.allocation for f in freed):
                freed.append(FreedArgument(root.param_index, v))
        return freed

    def _found(self, launch: Launch, records: list[host.DeviceViolation], dropped: int) -> None:
        heap = launch.heap
        pipeline = self.pipeline
        self.findings.device_records(
            launch.kernel, records, dropped, self.registry, launch.site, launch.freed_arguments,
            heap=lambda tag: heap_allocation(pipeline, heap, tag))

    def _records(self) -> list[host.AllocationRecord]:
        return [host.AllocationRecord(a.tag, a.base, a.size, a.state is State.LIVE)
                for a in self.registry.table()]

    def drain(self) -> None:
        """Read back the violation records of every finished launch."""
        with self._lock:
            if not self._pending:
                return
            if not self.backend.synchronous:
                self.driver.cuCtxSynchronize()
            pending, self._pending = self._pending, []
            for launch in pending:
                try:
                    records, dropped = self.pipeline.collect(launch)
                except (DeviceMemoryError, host.UnclassifiedTally) as e:
                    self.findings.problem(f"{launch.kernel}: {e}")
                    self.findings.freed_arguments(launch.kernel, launch.freed_arguments)
                    continue
                self._found(launch, records, dropped)
            self.pipeline.release_retired()
            self._heap_overflow()
        self.findings.changed()

    def _heap_overflow(self) -> None:
        """In-kernel mallocs the heap table had no room for are named: their
        accesses cannot be told from wild ones."""
        if not self.pipeline.heaps:
            return
        try:
            lost = self.pipeline.heap_unrecorded()
        except DeviceMemoryError as e:
            self.findings.problem(str(e))
            return
        if lost and not self._heap_lost:
            self._heap_lost = lost
            self.findings.problem(
                f"the device heap table is full: {lost} in-kernel malloc blocks were not "
                "recorded; accesses to them are reported as out of bounds and their frees "
                "are not checked")

    def forked(self) -> None:
        """In a forked child: the parent's allocations and launches are the
        parent's to report."""
        self.registry.inherit()
        self._pending = []
        self._lock = threading.RLock()

    def finish(self) -> None:
        """At process exit: the last launches, and leaks when asked for."""
        self.drain()
        if self.policy.leak_check:
            for leak in self.registry.leaks():
                self.findings.host_violation(leak)


def _dimensions(dims: tuple[Any, Any] | None) -> tuple[list[int], list[int]] | None:
    """The grid and block dimensions as integers; None (no launch proof, the
    checked body runs) when they are not given or not integers."""
    if dims is None:
        return None
    try:
        return [int(d) for d in dims[0]], [int(d) for d in dims[1]]
    except (TypeError, ValueError):
        return None

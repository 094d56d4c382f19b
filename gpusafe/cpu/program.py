"""A loaded module on the CPU device.

``Program(ptx_text, memory)`` parses the PTX, places the module's ``.global``
and ``.const`` variables in device memory (each its own allocation, so the
oracle checks accesses to them like any other) with their initializers
(``generic(var)+8`` and function addresses resolved), and describes every
kernel: parameter layout, static shared memory, local frame.  Functions are
decoded the first time a kernel that reaches them is launched; a construct
the CPU device cannot run is raised then (``UnsupportedInstruction``), so the
other kernels of the module still run.
"""

from __future__ import annotations

import functools
import itertools
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from gpusafe_instrument import nodes, ptx
from gpusafe_instrument.query import ParamSlot, located_instructions, param_layout

from .decoded import Binding, FunctionCode, ModuleSymbols, align_up
from .decoder import decode_function
from .errors import DeviceError, LaunchConfigError, UnsupportedInstruction
from .events import LaunchInfo, Observer
from .frames import MAX_LOCAL_PER_THREAD, Launch, static_stack
from .instructions import build
from .memory import FUNCTION_BASE, DeviceMemory
from .operands import immediate_bits
from .ptx_types import UNSIGNED
from .scheduler import run_launch

__all__ = ["KernelLayout", "LaunchResult", "Program"]

MAX_SHARED = 227 * 1024
"""Most shared memory a block may have (static + dynamic), as on sm_90."""

_grid_ids = itertools.count(1)


@dataclass
class KernelLayout:
    name: str
    params: list[ParamSlot]
    param_size: int
    static_shared: int
    local_size: int
    num_regs: int
    max_threads: int


@dataclass
class LaunchResult:
    instructions: int  # thread-instructions executed


RESERVED_SHARED = 1024
"""Bytes of runtime-reserved shared memory (``%reserved_smem_offset_*``, used by
cooperative groups on sm_80+) given to kernels that read those registers; it
sits at the start of the block's window, before the kernel's variables."""


GRID_WORKSPACE = struct.Struct("<II")
"""The grid workspace of a cooperative launch (``cooperative_groups::details::
grid_workspace``: its size, then the barrier word ``grid.sync()`` counts
arrivals in): device memory the driver owns, reset at each cooperative launch
and passed in ``%envreg1:%envreg2`` as a GPU's driver does."""


@dataclass
class _SharedLayout:
    offsets: dict[Any, int]
    static_size: int  # bytes of the kernel's own static variables
    static_end: int  # end of the static part of the window (reserved bytes included)
    dynamic_base: int
    reserved: int


class Program(ModuleSymbols):
    """A PTX module loaded into a :class:`DeviceMemory`.

    ``module`` is the parsed syntax tree; it is shared by every Program loaded
    from the same text and must not be modified.
    """

    def __init__(self, ptx_text: str, memory: DeviceMemory, device: int = -1) -> None:
        index = _module_index(ptx_text)
        self.module = index.module
        self.memory = memory
        self.device = device  # whose memory its variables are (-1: every device's)
        self.barred: Callable[[], frozenset[int] | None] | None = None
        """The devices whose memory its kernels may not reach, asked at each
        launch (peer access changes); None: every device's."""
        self._loaded = True
        self._functions = index.functions
        # module variables other than .shared: the JIT leaves kernels naming them
        self._module_globals = frozenset(v.name for v in self.module.variables
                                         if v.space != ".shared")
        self._function_address = {
            name: FUNCTION_BASE + 16 * (i + 1) for i, name in enumerate(self._functions)
        }
        self._function_at = {a: self._functions[n] for n, a in self._function_address.items()}
        self._bindings: dict[str, Binding] = {}
        self._function_vars: dict[tuple[str, str], Binding] = {}
        self._shared_vars: dict[Any, nodes.Variable] = {}  # key -> declaration, in order
        self._allocations: list[int] = []
        self._symbols: dict[str, tuple[int, int]] = {}
        self._codes: dict[str, FunctionCode] = {}
        self._static_stacks: dict[str, int] = {}  # kernel -> stack it needs without recursion
        self._place_variables()
        self._global_addresses = {name: b.address for name, b in self._bindings.items()
                                  if b.kind == "global"}
        self._references = index.references
        self._initializer_functions = index.initializer_functions
        self._layouts: dict[str, _SharedLayout] = {}
        self.kernels: dict[str, KernelLayout] = {
            f.name: self._kernel_info(f) for f in self._functions.values()
            if f.is_kernel and f.body is not None
        }

    # -- module variables ------------------------------------------------------

    def _place_variables(self) -> None:
        todo: list[tuple[nodes.Variable, int]] = []
        for var in self.module.variables:
            if var.space in (".global", ".const"):
                if var.type in (".texref", ".samplerref", ".surfref"):
                    self._bindings[var.name] = Binding("tex", var.name)
                    continue
                if ".extern" in var.linkage:
                    self._bindings[var.name] = Binding("extern", var.name)
                    continue
                address = self._allocate(var, var.name)
                self._bindings[var.name] = Binding(
                    "global", var.name, address=address, size=self._size(var), space=var.space[1:]
                )
                self._symbols[var.name] = (address, self._size(var))
                todo.append((var, address))
            elif var.space == ".shared":
                self._bindings[var.name] = Binding("shared", var.name, key=var.name)
                self._shared_vars[var.name] = var
        for f in self._functions.values():
            for var in _body_variables(f.body or []):
                key = (f.name, var.name)
                if var.space in (".global", ".const"):
                    address = self._allocate(var, f"{f.name}::{var.name}")
                    self._function_vars[key] = Binding(
                        "global", var.name, address=address, size=self._size(var),
                        space=var.space[1:],
                    )
                    todo.append((var, address))
                elif var.space == ".shared":
                    self._function_vars[key] = Binding("shared", var.name, key=key)
                    self._shared_vars[key] = var
        for var, address in todo:
            if var.init is not None:
                self.memory.write(address, self._initial_bytes(var))

    @staticmethod
    def _size(var: nodes.Variable) -> int:
        size = var.size
        if size is None:  # `x[] = {...}`: sized by its initializer
            size = var.element_size * len(_flatten(var.init)) if var.init is not None else 0
        return size

    def _allocate(self, var: nodes.Variable, label: str) -> int:
        size = self._size(var)
        align = var.align or var.element_size
        address = self.memory.alloc(max(size, 1), max(align, 1), label=f"module variable {label}")
        if self.device >= 0:
            self.memory.set_device(address, self.device)
        self._allocations.append(address)
        return address

    def _initial_bytes(self, var: nodes.Variable) -> np.ndarray:
        """The initial contents of a variable, as a uint8 array.

        Built with numpy throughout: no one-byte ``bytes`` objects, which
        CPython shares process-wide (code that writes into one, such as a
        C API filling ``b" " * n`` in place, would change them for everybody).
        """
        elem_type = var.type.lstrip(".")
        elem_size = nodes.type_size(elem_type)
        texts = [t.strip() for t in _flatten(var.init)]
        out = np.zeros(self._size(var), dtype=np.uint8)
        values = np.zeros(len(texts), dtype=np.uint64)
        for i, text in enumerate(texts):
            values[i] = self._initializer_value(text, elem_type)
        raw = values.view(np.uint8).reshape(len(texts), 8)[:, :elem_size].reshape(-1)
        out[:len(raw)] = raw[:len(out)]
        return out

    def _initializer_value(self, text: str, elem_type: str) -> int:
        """The bits of one initializer element (little-endian in the low bytes)."""
        size = nodes.type_size(elem_type)
        m = _ADDRESS_INIT.fullmatch(text)
        if m and not _NUMERIC.fullmatch(text):
            name = m.group(2)
            offset = int(m.group(4).replace(" ", "")) if m.group(4) else 0
            if name in self._function_address:
                base = self._function_address[name]
            elif name in self._symbols:
                base = self._symbols[name][0]
            else:
                raise ptx.ParseError(f"initializer refers to unknown symbol {name}", 0, 1, text)
            return (base + offset) & ((1 << (8 * size)) - 1)
        bits = immediate_bits(text, nodes.Immediate(text).value, elem_type)
        return int(bits.view(UNSIGNED[bits.dtype.itemsize]) if bits.dtype != np.bool_ else bits)

    # -- ModuleSymbols (for the decoder) ----------------------------------------

    def module_binding(self, name: str) -> Binding | None:
        b = self._bindings.get(name)
        if b is not None:
            return b
        f = self._functions.get(name)
        if f is not None:
            return Binding("func", name, address=self._function_address[name], node=f)
        return None

    def function_variable(self, function: str, var: nodes.Variable) -> Binding:
        return self._function_vars[(function, var.name)]

    def code(self, name: str) -> FunctionCode:
        code = self._codes.get(name)
        if code is None:
            code = decode_function(self, self._functions[name], build)
            self._codes[name] = code
        return code

    def function_at(self, address: int) -> nodes.Function | None:
        return self._function_at.get(address)

    def raise_errors(self, kernel: str, code: FunctionCode) -> None:
        if code.errors:
            line, opcode, reason = code.errors[0]
            if code.name != kernel:
                where = f"in function {code.name}"
                reason = f"{reason}; {where}" if reason else where
            raise UnsupportedInstruction(kernel, line, opcode, reason)

    # -- kernels ---------------------------------------------------------------

    def _static_stack(self, kernel: str) -> int:
        need = self._static_stacks.get(kernel)
        if need is None:
            def code_of(name: str) -> FunctionCode | None:
                f = self._functions.get(name)
                return None if f is None or f.body is None else self.code(name)

            need = self._static_stacks[kernel] = static_stack(kernel, code_of)
        return need

    def _closure(self, kernel: str) -> list[str]:
        """Functions a kernel can reach (calls and address-taken functions)."""
        seen = [kernel]
        todo = [kernel, *sorted(self._initializer_functions)]
        for name in todo[1:]:
            if name not in seen:
                seen.append(name)
        while todo:
            name = todo.pop()
            for ref in self._references.get(name, ()):
                if ref in self._functions and ref not in seen:
                    seen.append(ref)
                    todo.append(ref)
        return seen

    def _shared_layout(self, kernel: str) -> _SharedLayout:
        layout = self._layouts.get(kernel)
        if layout is not None:
            return layout
        used: set[Any] = set()
        for name in self._closure(kernel):
            refs = self._references.get(name, set())
            for key in self._shared_vars:
                if isinstance(key, tuple):
                    if key[0] == name:
                        used.add(key)
                elif key in refs:
                    used.add(key)
        reserved = 0
        if any(r.startswith("%reserved_smem") for name in self._closure(kernel)
               for r in self._references.get(name, ())):
            reserved = RESERVED_SHARED
        offsets: dict[Any, int] = {}
        offset = reserved
        dynamic_align = 16
        extern: list[Any] = []
        for key, var in self._shared_vars.items():
            if key not in used:
                continue
            align = var.align or var.element_size
            if var.size is None or ".extern" in var.linkage:
                extern.append(key)
                dynamic_align = max(dynamic_align, align)
                continue
            offset = align_up(offset, align)
            offsets[key] = offset
            offset += var.size
        dynamic_base = align_up(offset, dynamic_align)
        for key in extern:
            offsets[key] = dynamic_base
        layout = _SharedLayout(offsets, offset - reserved, offset, dynamic_base, reserved)
        self._layouts[kernel] = layout
        return layout

    def _kernel_info(self, f: nodes.Function) -> KernelLayout:
        layout, size = param_layout(f.params)
        local = 0
        regs = 0
        for s in _body_statements(f.body or []):
            if isinstance(s, nodes.Variable) and s.space == ".local" and s.size:
                local = align_up(local, s.align or s.element_size) + s.size
            elif isinstance(s, nodes.RegisterDecl):
                regs += len(s.registers())
        max_threads = 1024
        for name, values in f.directives:
            if name in (".maxntid", ".reqntid") and values:
                max_threads = min(max_threads, int(np.prod(values)))
        return KernelLayout(
            name=f.name, params=layout, param_size=size,
            static_shared=self._shared_layout(f.name).static_size,
            local_size=align_up(local, 16) if local else 0,
            num_regs=min(max(regs, 1), 255), max_threads=max_threads,
        )

    def global_symbol(self, name: str) -> tuple[int, int]:
        """(address, size) of a module ``.global``/``.const`` variable."""
        return self._symbols[name]

    # -- launching -------------------------------------------------------------

    def launch(
        self,
        kernel: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        params: bytes,
        *,
        observers: Sequence[Observer] = (),
        stdout: TextIO | None = None,
        stack_size: int | None = None,
        timeout: float | None = None,
        workspace: int = 0,
    ) -> LaunchResult:
        """Run one launch to its end.  ``stack_size``: the bytes of stack a
        thread may use (``CU_LIMIT_STACK_SIZE``; grown, as by a real driver,
        to what the kernel needs without recursion; None: the device's most).
        ``timeout``: seconds after which the launch stops with
        :class:`~gpusafe.cpu.errors.LaunchTimeout` (None: no limit).
        ``workspace``: the address of a grid workspace (:data:`GRID_WORKSPACE`)
        for a cooperative launch, whose blocks then all run co-resident so that
        ``grid.sync()`` works; the caller has checked that the grid fits."""
        if not self._loaded:
            raise LaunchConfigError("the module has been unloaded")
        info = self.kernels.get(kernel)
        if info is None:
            raise LaunchConfigError(f"no kernel named {kernel} in this module")
        grid = _dims(grid, "grid")
        block = _dims(block, "block")
        _check_config(info, grid, block, shared_bytes, params)
        function = self._functions[kernel]
        for directive, values in function.directives:
            clustered = directive in (".reqnctapercluster", ".explicitcluster")
            if clustered and int(np.prod(values or (2,))) > 1:
                raise UnsupportedInstruction(kernel, function.line, directive,
                                             "thread block clusters")
        for name in self._closure(kernel):
            if self._functions[name].body is not None:
                self.raise_errors(kernel, self.code(name))
        layout = self._shared_layout(kernel)
        window = layout.dynamic_base + shared_bytes if shared_bytes else layout.static_end
        if window > MAX_SHARED:
            raise LaunchConfigError(
                f"kernel {kernel}: {window} bytes of shared memory per block (at most {MAX_SHARED})"
            )
        launch_info = LaunchInfo(
            kernel=kernel, grid=grid, block=block, static_shared=layout.static_size,
            dynamic_shared=shared_bytes, shared_window=window, local_size=info.local_size,
        )
        code = self.code(kernel)
        stack_limit = MAX_LOCAL_PER_THREAD
        if stack_size is not None:
            stack_limit = min(max(stack_size, self._static_stack(kernel)), MAX_LOCAL_PER_THREAD)
        if workspace:
            self.memory.write(workspace, GRID_WORKSPACE.pack(GRID_WORKSPACE.size, 0))
        launch = Launch(self.memory, code, launch_info, bytes(params), layout.offsets,
                        list(observers), stdout, next(_grid_ids), stack_limit=stack_limit,
                        timeout=timeout, workspace=workspace)
        launch.reserved_shared = layout.reserved
        launch.functions = self._functions  # the JIT inlines the device functions it calls
        launch.module_globals = self._module_globals
        launch.global_addresses = self._global_addresses
        for o in observers:
            o.kernel_begin(launch_info)
        self.memory.barred = self.barred() if self.barred is not None else None
        try:
            run_launch(launch)
        except DeviceError as e:
            where = self.source_line(e.ptx_line) if e.ptx_line is not None else None
            if where:
                e.args = (f"{e} (source {where})",)
            raise
        finally:
            self.memory.barred = None
            for o in observers:
                o.instructions(launch.count)
                o.kernel_end(launch_info)
        return LaunchResult(instructions=launch.count)

    @functools.cached_property
    def _source_lines(self) -> dict[int, str]:
        files = self.module.files
        lines = {instr.line: f"{loc.file}:{loc.line}"
                 for fn in self.module.functions
                 for _, instr, loc in located_instructions(self.module, fn, files)
                 if loc is not None and loc.file}
        for line, site in _inlined_sites(self.module).items():
            if line in lines:
                lines[line] += f", inlined at {site}"
        return lines

    def source_line(self, ptx_line: int) -> str | None:
        """``file:line`` of the source the instruction at ``ptx_line`` was
        compiled from (its ``.loc``), if the module says."""
        return self._source_lines.get(ptx_line)

    def unload(self) -> None:
        """Free the module's variables; the program cannot launch afterwards."""
        if not self._loaded:
            return
        self._loaded = False
        for address in self._allocations:
            self.memory.free(address)
        self._allocations.clear()


# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _ModuleIndex:
    """What a module's text says, independent of where it is loaded."""

    module: nodes.Module
    functions: dict[str, nodes.Function]  # definitions win over declarations
    references: dict[str, set[str]]  # names each function's instructions use
    initializer_functions: frozenset[str]  # functions whose address a variable holds


@functools.lru_cache(maxsize=8)
def _module_index(ptx_text: str) -> _ModuleIndex:
    """Parse once per distinct text (a program often loads a module several
    times); nothing here is modified afterwards."""
    module = ptx.parse(ptx_text)
    functions: dict[str, nodes.Function] = {}
    for f in module.functions:
        if f.name not in functions or f.body is not None:
            functions[f.name] = f
    references = {name: _referenced_names(f) for name, f in functions.items()}
    in_initializers: set[str] = set()
    for var in module.variables:
        if var.init is not None:
            for text in _flatten(var.init):
                m = _ADDRESS_INIT.fullmatch(text.strip())
                if m and m.group(2) in functions:
                    in_initializers.add(m.group(2))
    return _ModuleIndex(module, functions, references, frozenset(in_initializers))


_ADDRESS_INIT = re.compile(r"(generic\()?\s*([A-Za-z_$%][\w$.]*)\s*(\))?\s*([+-]\s*\d+)?")
_NUMERIC = re.compile(
    r"-?(0[fFdD][0-9A-Fa-f]+|0[xX][0-9A-Fa-f]+U?|0[bB][01]+U?|[0-9.]+(?:[eE][+-]?\d+)?U?)")


def _inlined_sites(module: nodes.Module) -> dict[int, str]:
    """``file:line`` of the call an instruction was inlined into, by PTX line,
    where its ``.loc`` says (``inlined_at``): the line of the user's code
    behind an instruction of a header's inline function (``surf2Dwrite``,
    ``tex2D``, ...)."""
    files = module.files
    out: dict[int, str] = {}

    def visit(statements: list[nodes.Statement], loc: nodes.Loc | None) -> nodes.Loc | None:
        for s in statements:
            if isinstance(s, nodes.Loc):
                loc = s
            elif isinstance(s, nodes.Block):
                loc = visit(s.statements, loc)
            elif isinstance(s, nodes.Instruction) and loc is not None and loc.inlined_at:
                file, line, _ = loc.inlined_at
                if files.get(file):
                    out[s.line] = f"{files[file]}:{line}"
        return loc

    for fn in module.functions:
        visit(fn.body or [], None)
    return out


def _flatten(init: Any) -> list[str]:
    if init is None:
        return []
    if isinstance(init, str):
        return [init]
    out: list[str] = []
    for item in init:
        out.extend(_flatten(item))
    return out


def _body_statements(statements: list[nodes.Statement]) -> list[nodes.Statement]:
    out: list[nodes.Statement] = []
    for s in statements:
        if isinstance(s, nodes.Block):
            out.extend(_body_statements(s.statements))
        else:
            out.append(s)
    return out


def _body_variables(statements: list[nodes.Statement]) -> list[nodes.Variable]:
    return [s for s in _body_statements(statements) if isinstance(s, nodes.Variable)]


def _operand_names(operand: nodes.Operand, out: set[str]) -> None:
    if isinstance(operand, nodes.Register):
        if operand.name.startswith("%reserved_smem"):
            out.add(operand.name)
    elif isinstance(operand, nodes.Symbol):
        out.add(operand.name)
    elif isinstance(operand, nodes.SymbolOffset):
        out.add(operand.name)
    elif isinstance(operand, nodes.Address):
        if isinstance(operand.base, nodes.Symbol):
            out.add(operand.base.name)
    elif isinstance(operand, (nodes.Vector, nodes.ArgumentList)):
        for item in operand.items:
            _operand_names(item, out)


def _referenced_names(function: nodes.Function) -> set[str]:
    names: set[str] = set()
    for s in _body_statements(function.body or []):
        if isinstance(s, nodes.Instruction):
            for o in s.operands:
                _operand_names(o, names)
    return names


def _dims(value: Sequence[int], what: str) -> tuple[int, int, int]:
    try:
        dims = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise LaunchConfigError(
            f"{what} dimensions must be three integers, got {value!r}") from None
    if len(dims) != 3:
        raise LaunchConfigError(f"{what} dimensions must be three integers, got {value!r}")
    return dims  # type: ignore[return-value]


def _check_config(info: KernelLayout, grid: tuple[int, int, int], block: tuple[int, int, int],
                  shared_bytes: int, params: bytes) -> None:
    name = info.name
    if min(grid) < 1 or grid[0] > 2**31 - 1 or grid[1] > 65535 or grid[2] > 65535:
        raise LaunchConfigError(f"kernel {name}: invalid grid {grid}")
    if min(block) < 1 or block[0] > 1024 or block[1] > 1024 or block[2] > 64:
        raise LaunchConfigError(f"kernel {name}: invalid block {block}")
    threads = block[0] * block[1] * block[2]
    if threads > min(1024, info.max_threads):
        raise LaunchConfigError(
            f"kernel {name}: {threads} threads per block (at most {min(1024, info.max_threads)})"
        )
    if shared_bytes < 0:
        raise LaunchConfigError(f"kernel {name}: negative dynamic shared memory size")
    if len(params) != info.param_size:
        raise LaunchConfigError(
            f"kernel {name}: {len(params)} bytes of parameters, the kernel takes {info.param_size}"
        )

"""What decoding makes of a PTX function: the records every layer of the CPU
device shares (the decoder fills them, the instruction builders return them,
the scheduler runs them, the launch machinery holds them).

Each decoded instruction is an :class:`Op`: *simple* ops (``simple=True``) run
as ``run(frame, act, nact)`` and fall through to the next instruction;
*control* ops run as ``run(frame, act, nact, pc) -> (act, nact, pc)`` and tell
the scheduler where the lanes go (``act=None``: ask the scheduler).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpusafe_instrument import nodes

FRAME_PARAM_FLAG = 1 << 40
"""Set in a ``.param``-space address that names the frame's own per-lane param
area (call arguments, a function's parameters); clear for kernel parameters."""


def align_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


class DecodeError(Exception):
    """An instruction that cannot be decoded (becomes UnsupportedInstruction)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(eq=False)
class Op:
    simple: bool
    run: Callable[..., Any]
    instr: nodes.Instruction | None
    # control flow, for the scheduler's analysis of the function (a simple op
    # falls through and jumps nowhere):
    jumps: tuple[int, ...] = ()  # instruction indices it may branch to
    falls: bool = True  # whether lanes may continue at the next instruction
    joins: bool = False  # a call: lanes that can still reach it run it together


@dataclass
class Binding:
    """What a name means inside a function."""

    kind: str  # reg | local | param | kparam | shared | global | func | proto | label | ...
    name: str = ""
    slot: int = -1
    dtype: np.dtype | None = None
    offset: int = 0
    size: int = 0
    key: Any = None
    address: int = 0
    space: str = ""
    node: Any = None


@dataclass
class FunctionCode:
    """A decoded function, shared by every launch of its module."""

    name: str
    function: nodes.Function
    ops: list[Op] = field(default_factory=list)
    op_of_statement: list[int] = field(default_factory=list)
    """Index of the first op of each top-level statement of the body (the
    statement's place in :mod:`gpusafe_instrument.cfg`'s blocks), and one past the end."""
    reg_dtypes: list[np.dtype] = field(default_factory=list)
    reg_names: list[str] = field(default_factory=list)
    local_size: int = 0
    param_size: int = 0
    params: list[Binding] = field(default_factory=list)
    returns: list[Binding] = field(default_factory=list)
    callees: set[str] = field(default_factory=set)
    errors: list[tuple[int, str, str]] = field(default_factory=list)
    gathering: Any = None  # where lanes gather at calls (call_gathering), built on first need

    @property
    def is_kernel(self) -> bool:
        return self.function.is_kernel

    @property
    def register_bytes(self) -> int:
        return sum(dt.itemsize for dt in self.reg_dtypes)


class ModuleSymbols:
    """What decoding and calls need to know about the module (implemented by Program)."""

    def module_binding(self, name: str) -> Binding | None:  # pragma: no cover - interface
        raise NotImplementedError

    def function_variable(self, function: str, var: nodes.Variable) -> Binding:
        raise NotImplementedError  # pragma: no cover - interface

    def code(self, name: str) -> FunctionCode:
        """The decoded function ``name`` (decoded on first use)."""
        raise NotImplementedError  # pragma: no cover - interface

    def function_at(self, address: int) -> nodes.Function | None:
        """The function whose address (a function pointer) is ``address``."""
        raise NotImplementedError  # pragma: no cover - interface

    def raise_errors(self, kernel: str, code: FunctionCode) -> None:
        """Raise the first construct of ``code`` the CPU device cannot run."""
        raise NotImplementedError  # pragma: no cover - interface

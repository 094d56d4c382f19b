"""What the pass gives back: the checked module with its site table and
statistics, the error for a module it cannot instrument at all, and the
reason one function cannot be checked (which leaves the kernels reaching it
unchecked, never the whole module refused)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..nodes import Instruction, Module
from ..sites import SiteTable


class InstrumentError(Exception):
    """A module the pass cannot instrument at all (already instrumented, 32-bit,
    too old a PTX ISA); names the function, the PTX line and the instruction
    when one is to blame."""

    def __init__(self, message: str, function: str | None = None,
                 ptx_line: int | None = None, instruction: str | None = None) -> None:
        self.message = message
        self.function = function
        self.ptx_line = ptx_line
        self.instruction = instruction
        where = ""
        if function is not None:
            where += f"in {function}"
        if ptx_line:
            where += f", PTX line {ptx_line}"
        text = f"{where}: {message}" if where else message
        if instruction:
            text += f"\n    {instruction}"
        super().__init__(text)


class CannotCheck(Exception):
    """An instruction of one function the pass cannot check.  The function is
    left as it was, and so is every kernel that reaches it; ``reason`` is what
    ``SiteTable.unchecked`` says about such a kernel."""

    def __init__(self, instr: Instruction, why: str) -> None:
        self.instruction = instr
        self.why = why
        self.reason = f"PTX line {instr.line}: cannot check `{instr.canonical()}`: {why}"
        super().__init__(self.reason)


@dataclass
class FunctionStats:
    name: str
    kind: str  # "kernel" | "function"
    memory_instructions: int = 0
    unchecked: Counter = field(default_factory=Counter)  # space -> count (param, const)
    checks: Counter = field(default_factory=Counter)  # root/window/lookup/alignment
    generic_checks: int = 0  # of the checks, those on generic addresses
    removed: Counter = field(default_factory=Counter)  # reason -> count
    slots: int = 0
    proven_at_launch: int = 0  # checks a launch proof can leave out (``launch_proof``)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "kind": self.kind,
            "memory_instructions": self.memory_instructions,
            "unchecked": dict(self.unchecked), "checks": dict(self.checks),
            "generic_checks": self.generic_checks, "removed": dict(self.removed),
            "slots": self.slots, "proven_at_launch": self.proven_at_launch,
        }


@dataclass
class InstrumentResult:
    ptx: str
    sites: SiteTable
    stats: dict[str, FunctionStats]
    module: Module
    """The checked module; the functions the pass rewrote hold their body as
    its printed text (:class:`~gpusafe_instrument.nodes.Verbatim` pieces): parse
    ``ptx`` for their statements."""

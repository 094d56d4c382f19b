"""Calls to external device functions the CUDA runtime provides: ``vprintf``,
``malloc``, ``free``, ``__assertfail``.  Anything else external is an
unsupported instruction (the call names it).

Lanes are served in global thread order, so printf output is deterministic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusafe_instrument import nodes

from .call_operands import CallOperand, arg_bytes
from .decoded import DecodeError
from .decoder import DecodeContext
from .errors import AssertError, IllegalAddress, InvalidAddress, TrapError
from .frames import Frame, as_index
from .memory import LOCAL_STACK_BASE, LOCAL_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from .printf import c_string, format_printf
from .ptx_types import UNSIGNED


def read_generic(fr: Frame, i: int, address: int, size: int) -> bytes:
    """``size`` bytes at a generic address as seen by frame lane ``i``."""
    chunk = fr.chunk
    if 0 <= address - SHARED_WINDOW < WINDOW_SIZE:
        off = address - SHARED_WINDOW
        row = int(chunk.block_row[fr.chunk_lanes(np.array([i]))[0]])
        start = row * chunk.shared_stride + off
        end = min(start + size, (row + 1) * chunk.shared_stride)
        return chunk.shared[start:end].tobytes()
    if 0 <= address - LOCAL_WINDOW < WINDOW_SIZE:
        off = address - LOCAL_WINDOW - LOCAL_STACK_BASE
        if off < 0:
            raise IllegalAddress(address)
        lane = int(fr.chunk_lanes(np.array([i]))[0])
        start = lane * chunk.local_stride + off
        end = min(start + size, (lane + 1) * chunk.local_stride)
        return chunk.local[start:end].tobytes()
    memory = fr.launch.memory
    size = max(0, min(size, memory.top - address))
    return memory.peek(address, size)


def read_cstring(fr: Frame, i: int, address: int, limit: int = 1 << 16) -> bytes:
    return c_string(lambda a, n: read_generic(fr, i, a, n), address, limit)


def _vprintf(fr: Frame, idx: np.ndarray, args: list[np.ndarray],
             instr: nodes.Instruction) -> np.ndarray:
    out = fr.launch.out()
    result = np.zeros(len(idx), dtype=np.uint64)
    for k, i in enumerate(idx):
        i = int(i)
        fmt = read_cstring(fr, i, int(args[0][k]))
        buffer_address = int(args[1][k])
        raw = read_generic(fr, i, buffer_address, 256) if buffer_address else b""
        text = format_printf(fmt, raw, lambda a, i=i: read_cstring(fr, i, a))
        out.write(text)
        result[k] = len(text)
    return result


def _malloc(fr: Frame, idx: np.ndarray, args: list[np.ndarray],
            instr: nodes.Instruction) -> np.ndarray:
    memory = fr.launch.memory
    result = np.zeros(len(idx), dtype=np.uint64)
    for k, size in enumerate(args[0]):
        if int(size):
            result[k] = memory.alloc(int(size), 16, label="device malloc")
    return result


def _free(fr: Frame, idx: np.ndarray, args: list[np.ndarray], instr: nodes.Instruction) -> None:
    memory = fr.launch.memory
    for k, address in enumerate(args[0]):
        if int(address):
            try:
                memory.free(int(address))
            except InvalidAddress as e:
                raise TrapError(
                    f"kernel {fr.launch.kernel}: PTX line {instr.line}: device free(): {e} "
                    f"({fr.describe_lane(int(idx[k]))})"
                ) from None
    return None


def _assertfail(fr: Frame, idx: np.ndarray, args: list[np.ndarray],
                instr: nodes.Instruction) -> None:
    out = fr.launch.out()
    first = None
    for k, i in enumerate(idx):
        i = int(i)
        message = read_cstring(fr, i, int(args[0][k])).decode("utf-8", "replace")
        file = read_cstring(fr, i, int(args[1][k])).decode("utf-8", "replace")
        line = int(args[2][k]) & 0xFFFF_FFFF
        function = read_cstring(fr, i, int(args[3][k])).decode("utf-8", "replace")
        thread, block = fr.launch.info.thread_of(int(fr.global_ids(np.array([i]))[0]))
        text = (f"{file}:{line}: {function}: block: [{block[0]},{block[1]},{block[2]}], "
                f"thread: [{thread[0]},{thread[1]},{thread[2]}] Assertion `{message}` failed.\n")
        out.write(text)
        if first is None:
            first = text.strip()
    raise AssertError(f"kernel {fr.launch.kernel}: {first}")


_BUILTINS = {
    "vprintf": _vprintf,
    "malloc": _malloc,
    "free": _free,
    "__assertfail": _assertfail,
}


def builtin_call(ctx: DecodeContext, instr: nodes.Instruction, function: nodes.Function,
                 arg_moves: list[CallOperand], ret_moves: list[CallOperand]) -> Any:
    """The control op's body of a call to a runtime-provided external function."""
    impl = _BUILTINS.get(function.name)
    if impl is None:
        raise DecodeError(f"call to the external function {function.name}, which the CPU "
                          "device does not provide")
    sizes = [p.size for p in function.params]
    if len(sizes) != len(arg_moves):
        raise DecodeError(f"{function.name} called with {len(arg_moves)} arguments, "
                          f"declared with {len(sizes)}")
    ret_size = function.returns[0].size if function.returns else 0

    def run(fr: Frame, act: Any, nact: int, cur: int) -> tuple[Any, int, int]:
        idx = as_index(act, fr.n)
        args = []
        for move, size in zip(arg_moves, sizes, strict=True):
            raw = np.ascontiguousarray(arg_bytes(fr, idx, move, size))
            args.append(raw.view(UNSIGNED[size]).reshape(-1).astype(np.uint64))
        result = impl(fr, idx, args, instr)
        if ret_moves and result is not None and ret_size:
            move = ret_moves[0]
            data = result.astype(UNSIGNED[ret_size]).view(np.uint8).reshape(len(idx), ret_size)
            if move.kind == "param":
                fr.params[idx, move.offset: move.offset + ret_size] = data[:, : move.size]
            elif move.kind == "reg":
                fr.regs[move.slot][idx] = result.astype(move.dtype)
        return act, nact, cur + 1

    return run

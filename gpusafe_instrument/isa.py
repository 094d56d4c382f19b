"""What the toolkit knows of the PTX ISA: the newest version it reads and the
name of every instruction.

The parser refuses a module that declares a newer ``.version`` and an
instruction whose name is not here, naming the line: a typo or an
instruction of a later ISA is an error, never something passed through
unread.  The table follows the instruction set chapter of the PTX ISA 9.0
(CUDA 13.0, the NVRTC and ptxas the tests pin); an instruction is named by
its first dotted component (``cp`` for ``cp.async.bulk.tensor``, ``bar`` for
``bar.warp.sync``).
"""

from __future__ import annotations

NEWEST_PTX_ISA: tuple[int, int] = (9, 0)
"""The newest ``.version`` the toolkit reads (CUDA 13.0's PTX ISA)."""

INSTRUCTIONS: frozenset[str] = frozenset({
    # integer arithmetic (.cc forms of add, sub and mad included)
    "add", "sub", "mul", "mad", "mul24", "mad24", "sad", "div", "rem", "abs", "neg",
    "min", "max", "popc", "clz", "bfind", "fns", "brev", "bfe", "bfi", "szext", "bmsk",
    "dp4a", "dp2a", "addc", "subc", "madc",
    # floating point, half precision, mixed precision
    "testp", "copysign", "fma", "rcp", "sqrt", "rsqrt", "sin", "cos", "lg2", "ex2", "tanh",
    # comparison and selection
    "set", "setp", "selp", "slct",
    # logic and shift
    "and", "or", "xor", "not", "cnot", "lop3", "shf", "shl", "shr",
    # data movement and conversion
    "mov", "shfl", "prmt", "ld", "ldu", "st", "prefetch", "prefetchu", "applypriority",
    "discard", "createpolicy", "isspacep", "cvta", "cvt", "mapa", "getctarank", "cp",
    "multimem", "tensormap", "ldmatrix", "stmatrix", "movmatrix",
    # texture and surface
    "tex", "tld4", "txq", "istypep", "suld", "sust", "sured", "suq",
    # control flow
    "bra", "brx", "call", "ret", "exit",
    # parallel synchronisation and communication
    "bar", "barrier", "membar", "fence", "atom", "red", "vote", "match", "activemask",
    "redux", "griddepcontrol", "elect", "mbarrier", "clusterlaunchcontrol",
    # matrix multiply-accumulate (warp, warpgroup, 5th-generation tensor cores)
    "wmma", "mma", "wgmma", "tcgen05",
    # stack manipulation
    "stacksave", "stackrestore", "alloca",
    # video (scalar, SIMD two-way, SIMD four-way)
    "vadd", "vsub", "vabsdiff", "vmin", "vmax", "vshl", "vshr", "vmad", "vset",
    "vadd2", "vsub2", "vavrg2", "vabsdiff2", "vmin2", "vmax2", "vset2",
    "vadd4", "vsub4", "vavrg4", "vabsdiff4", "vmin4", "vmax4", "vset4",
    # miscellaneous
    "brkpt", "nanosleep", "pmevent", "trap", "setmaxnreg",
})
"""Every PTX ISA 9.0 instruction, by its first dotted component."""


def newer_than_known(version: tuple[int, int]) -> bool:
    """Whether a module's ``.version`` is newer than the toolkit reads."""
    return version > NEWEST_PTX_ISA

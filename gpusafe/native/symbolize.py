"""Native host stacks: the return addresses the stand-in driver captured at
a native program's call, as the program's own frames (function, file:line).

The stand-in (shim.c) takes the C stack with ``backtrace()`` when the
program enters the driver or the runtime; here each address is mapped to
its module through ``/proc/self/maps`` and symbolized from the module's
DWARF line table and subprograms with pyelftools, cached per module.  Frames
in modules without line information (libc, libpython, libstdc++, the
dynamic loader) and in gpusafe's stand-ins are not the program's and are
dropped, and so are the innermost frames in the CUDA headers' inline
wrappers and in the host stubs nvcc generates for a kernel
(``__device_stub__...`` and the wrapper named as the kernel): a launch is
reported at its ``<<<...>>>`` line, an allocation at its ``cudaMalloc``.
"""

from __future__ import annotations

import bisect
import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine.callsite import CallSite

Raw = tuple[str, int, str]

_MAX_FRAMES = 48


@dataclass
class _Module:
    """One ELF file's load segments, line rows and function ranges."""

    path: str
    loads: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, size, vaddr)
    rows: list[int] = field(default_factory=list)  # addresses, sorted
    lines: list[tuple[str, int] | None] = field(default_factory=list)  # None: a gap
    starts: list[int] = field(default_factory=list)  # function ranges, sorted by start
    functions: list[tuple[int, str]] = field(default_factory=list)  # (end, name)

    def vaddr(self, file_offset: int) -> int | None:
        for offset, size, vaddr in self.loads:
            if offset <= file_offset < offset + size:
                return file_offset - offset + vaddr
        return None

    def line(self, pc: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.rows, pc) - 1
        return self.lines[i] if i >= 0 else None

    def function(self, pc: int) -> str:
        i = bisect.bisect_right(self.starts, pc) - 1
        if i >= 0 and pc < self.functions[i][0]:
            return self.functions[i][1]
        return "??"


_modules: dict[str, _Module | None] = {}
_maps: list[tuple[int, int, int, str]] = []  # (start, end, file offset, path), sorted
_frames: dict[int, Raw | None] = {}  # return address -> frame (None: not the program's)
_helpers: set[Raw] = set()


def _read_maps() -> None:
    entries = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            entries.append((start, end, int(parts[2], 16), parts[5].rstrip("\n")))
    entries.sort()
    _maps[:] = entries


def _mapping(address: int, retry: bool = True) -> tuple[int, int, str] | None:
    """(mapping start, file offset, path) of a code address."""
    i = bisect.bisect_right(_maps, (address, float("inf"))) - 1
    if i >= 0 and _maps[i][0] <= address < _maps[i][1]:
        start, _, offset, path = _maps[i]
        return start, offset, path
    if retry:  # a library loaded since the maps were read
        _read_maps()
        return _mapping(address, retry=False)
    return None


def _is_tool(path: str) -> bool:
    """gpusafe's stand-ins and the interpreter that runs gpusafe."""
    name = os.path.basename(path)
    return f"{os.sep}gpusafe{os.sep}native{os.sep}" in path or name.startswith("libpython")


def _load(path: str) -> _Module | None:
    """The module's tables; None when it carries no line information."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if not elf.has_dwarf_info() or elf.get_section_by_name(".debug_line") is None:
                return None
            module = _Module(path)
            module.loads = [(s["p_offset"], s["p_filesz"], s["p_vaddr"])
                            for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            dwarf = elf.get_dwarf_info()
            rows: list[tuple[int, tuple[str, int] | None]] = []
            ranges: list[tuple[int, int, str]] = []
            for cu in dwarf.iter_CUs():
                top = cu.get_top_DIE()
                comp_dir = _text(top.attributes.get("DW_AT_comp_dir"))
                program = dwarf.line_program_for_CU(cu)
                if program is not None:
                    rows.extend(_line_rows(program, comp_dir))
                ranges.extend(_subprograms(cu))
    except (OSError, ELFError, ValueError, KeyError):
        return None
    rows.sort(key=lambda r: (r[0], r[1] is not None))
    module.rows = [a for a, _ in rows]
    module.lines = [where for _, where in rows]
    ranges.sort()
    module.starts = [s for s, _, _ in ranges]
    module.functions = [(e, n) for _, e, n in ranges]
    return module


def _text(attribute: object) -> str:
    value = getattr(attribute, "value", None)
    return value.decode(errors="replace") if isinstance(value, bytes) else ""


def _line_rows(program: object, comp_dir: str) -> list[tuple[int, tuple[str, int] | None]]:
    header = program.header  # type: ignore[attr-defined]
    version = header["version"]
    dirs = [d.decode(errors="replace") if isinstance(d, bytes) else str(d)
            for d in header["include_directory"]]
    files = header["file_entry"]

    def name(index: int) -> str:
        entry = files[index if version >= 5 else index - 1]
        base = entry.name.decode(errors="replace")
        d = entry.dir_index if version >= 5 else entry.dir_index - 1
        folder = dirs[d] if 0 <= d < len(dirs) else comp_dir
        if version < 5 and entry.dir_index == 0:
            folder = comp_dir
        full = os.path.join(folder, base)
        return os.path.normpath(os.path.join(comp_dir, full))

    names: dict[int, str] = {}
    out: list[tuple[int, tuple[str, int] | None]] = []
    for entry in program.get_entries():  # type: ignore[attr-defined]
        state = entry.state
        if state is None:
            continue
        if state.end_sequence:
            out.append((state.address, None))
            continue
        if state.file not in names:
            try:
                names[state.file] = name(state.file)
            except IndexError:
                names[state.file] = "??"
        out.append((state.address, (names[state.file], state.line)))
    return out


def _subprograms(cu: object) -> list[tuple[int, int, str]]:
    out = []
    for die in cu.iter_DIEs():  # type: ignore[attr-defined]
        if die.tag != "DW_TAG_subprogram":
            continue
        low, high = die.attributes.get("DW_AT_low_pc"), die.attributes.get("DW_AT_high_pc")
        if low is None or high is None:
            continue
        end = high.value if high.form == "DW_FORM_addr" else low.value + high.value
        named = die
        for _ in range(3):  # a definition names its declaration or abstract origin
            if "DW_AT_name" in named.attributes:
                break
            ref = named.attributes.get("DW_AT_specification") or \
                named.attributes.get("DW_AT_abstract_origin")
            if ref is None:
                break
            named = named.get_DIE_from_attribute(ref.name)
        out.append((low.value, end, _text(named.attributes.get("DW_AT_name")) or "??"))
    return out


def _is_helper(path: str, function: str) -> bool:
    """Code the program did not write at that line: nvcc's kernel stubs and
    the CUDA headers' inline wrappers (``cudaLaunchKernel<T>``)."""
    if function.startswith("__device_stub__") or ".stub.c" in path:
        return True
    parts = path.split(os.sep)
    return "include" in parts and (os.path.basename(path).startswith(("cuda", "crt"))
                                   or "crt" in parts)


def frame(address: int) -> Raw | None:
    """The program's frame at a return address (None: not the program's)."""
    if address in _frames:
        return _frames[address]
    found: Raw | None = None
    where = _mapping(address)
    if where is not None:
        start, offset, path = where
        if not _is_tool(path):
            if path not in _modules:
                _modules[path] = _load(path)
            module = _modules[path]
            vaddr = module.vaddr(address - start + offset) if module else None
            if module is not None and vaddr is not None:
                pc = vaddr - 1  # the call instruction, not the one after it
                line = module.line(pc)
                if line is not None:
                    found = (line[0], line[1], module.function(pc))
                    if _is_helper(line[0], found[2]):
                        _helpers.add(found)
    _frames[address] = found
    return found


def site(addresses: list[int], depth: int) -> CallSite | None:
    """The program's call site from the captured return addresses: the
    innermost frames that are nvcc's or the CUDA headers' are dropped (the
    program did not write them), so the stack starts at the program's line."""
    raw = [f for f in map(frame, addresses) if f is not None]
    top = 0
    while top < len(raw) and (raw[top] in _helpers
                              or top and raw[top - 1][2].startswith("__device_stub__")):
        top += 1  # the frame above a kernel's stub is nvcc's wrapper named as the kernel
    raw = raw[top:]
    if not raw:
        return None
    if depth == 0:
        return CallSite((raw[0],), 0, recorded=False, cwd=os.getcwd())
    return CallSite(tuple(raw[:max(depth, 1)]), 0, cwd=os.getcwd())


def provider(library: str | None = None) -> Callable[[int], CallSite | None] | None:
    """The stacks of the stand-in driver loaded in this process (None when
    it is not loaded: a program that never reaches it has no native frames).
    Under the LD_PRELOAD door the stand-in is named by its path, which the
    door never reroutes."""
    library = library or os.environ.get("GPUSAFE_CHECKED_DRIVER") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        take = lib.gpusafe_native_frames
    except (OSError, AttributeError):
        return None
    take.restype = ctypes.c_int
    take.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    buffer = (ctypes.c_void_p * _MAX_FRAMES)()

    def native_site(depth: int) -> CallSite | None:
        n = take(buffer, _MAX_FRAMES)
        return site([buffer[i] for i in range(n) if buffer[i]], depth) if n else None

    return native_site

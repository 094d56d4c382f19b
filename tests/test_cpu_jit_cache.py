"""The JIT's disk cache (gpusafe/cpu/jit/cache.py): a second engine or process
links the cached object code instead of compiling, a change of the key
(kernel text, compiler source) misses, a damaged entry is a miss, and the
cached code computes what fresh code computes."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpusafe.cpu.jit import cache, engine
from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.program import Program

PTX = """
.version 7.8
.target sm_75
.address_size 64

.visible .entry add_k(.param .u64 out, .param .u32 n)
{
    .reg .pred %p;
    .reg .b32 %r<5>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    setp.ge.u32 %p, %r2, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd2, %rd2, %rd3;
    add.u32 %r3, %r2, ADDEND;
    st.global.u32 [%rd2], %r3;
DONE:
    ret;
}
"""


def _launch(monkeypatch, addend: int = 7) -> np.ndarray:
    monkeypatch.setenv("GPUSAFE_CPU_ENGINE", "jit")
    mem = DeviceMemory()
    program = Program(PTX.replace("ADDEND", str(addend)), mem)
    out = mem.alloc(4 * 32)
    program.launch("add_k", (1, 1, 1), (32, 1, 1), 0, struct.pack("<QI", out, 32))
    return np.frombuffer(mem.read(out, 4 * 32), np.uint32)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty cache directory, an empty in-process cache, zeroed counters."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(engine, "_CACHE", {})
    monkeypatch.setattr(cache, "DISK", cache.DiskStats())
    return tmp_path


def test_second_engine_links_the_cached_object_code(fresh, monkeypatch):
    first = _launch(monkeypatch)
    assert (cache.DISK.misses, cache.DISK.stores, cache.DISK.hits) == (1, 1, 0)
    assert len(list((fresh / "gpusafe" / "jit").glob("*.o"))) == 1
    monkeypatch.setattr(engine, "_CACHE", {})  # a new process has none
    second = _launch(monkeypatch)
    assert cache.DISK.hits == 1 and cache.DISK.stores == 1
    assert np.array_equal(first, np.arange(32, dtype=np.uint32) + 7)
    assert np.array_equal(second, first)


def test_a_change_of_kernel_or_compiler_misses(fresh, monkeypatch):
    _launch(monkeypatch)
    monkeypatch.setattr(engine, "_CACHE", {})
    assert np.array_equal(_launch(monkeypatch, addend=9), np.arange(32, dtype=np.uint32) + 9)
    assert cache.DISK.hits == 0 and cache.DISK.stores == 2
    monkeypatch.setattr(engine, "_CACHE", {})
    monkeypatch.setattr(engine, "_COMPILER_HASH", "an edited compiler")
    _launch(monkeypatch)
    assert cache.DISK.hits == 0 and cache.DISK.stores == 3


def test_a_damaged_entry_is_a_miss_and_is_replaced(fresh, monkeypatch):
    _launch(monkeypatch)
    (entry,) = (fresh / "gpusafe" / "jit").glob("*.o")
    raw = entry.read_bytes()
    entry.write_bytes(raw[:-16] + bytes(16))  # the code, not the header, damaged
    monkeypatch.setattr(engine, "_CACHE", {})
    assert np.array_equal(_launch(monkeypatch), np.arange(32, dtype=np.uint32) + 7)
    assert cache.DISK.hits == 0 and cache.DISK.stores == 2
    assert entry.read_bytes() == raw


def test_the_cache_can_be_turned_off(fresh, monkeypatch):
    monkeypatch.setenv("GPUSAFE_JIT_CACHE", "0")
    _launch(monkeypatch)
    assert cache.DISK.stores == 0
    assert not (fresh / "gpusafe" / "jit").exists()


@pytest.mark.slow  # two interpreters importing gpusafe and llvmlite: about 3 s
def test_a_second_process_hits_the_cache(tmp_path):
    script = textwrap.dedent(f"""
        import struct, sys
        sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
        import numpy as np
        from test_cpu_jit_cache import PTX
        from gpusafe.cpu.jit import cache
        from gpusafe.cpu.memory import DeviceMemory
        from gpusafe.cpu.program import Program
        mem = DeviceMemory()
        program = Program(PTX.replace("ADDEND", "7"), mem)
        out = mem.alloc(128)
        program.launch("add_k", (1, 1, 1), (32, 1, 1), 0, struct.pack("<QI", out, 32))
        ok = np.array_equal(np.frombuffer(mem.read(out, 128), np.uint32), np.arange(32) + 7)
        print(cache.DISK.hits, cache.DISK.stores, ok)
    """)
    import os
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), GPUSAFE_CPU_ENGINE="jit")
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs == [["0", "1", "True"], ["1", "0", "True"]]

"""Every kernel of tests/kernels/specs.py, compiled by NVRTC (-O3 and -G), and
the numba kernels of the corpus run on the CPU device and match their numpy
references.  A kernel that does not run or does not match fails its test."""

from __future__ import annotations

import io
import math
import struct

import numpy as np
import pytest
from kernels.specs import ARCH_DEPENDENT, SPECS, Buffer, KernelSpec, Scalar

from gpusafe.cpu.memory import DeviceMemory
from gpusafe.cpu.oracle import Oracle
from gpusafe.cpu.program import Program
from gpusafe_testkit.corpus import compile_kernel_file, numba_modules

VARIANTS = {"O3": (), "G": ("-G",)}


def run_spec(spec: KernelSpec, ptx: str, *, oracle: bool = True) -> tuple[dict, str, list]:
    """Allocate, upload, launch and download one spec; returns (outputs, stdout, violations)."""
    memory = DeviceMemory()
    program = Program(ptx, memory)
    addresses = {b.name: memory.alloc(max(b.nbytes, 1)) for b in spec.buffers}
    for b in spec.buffers:
        data = bytearray(b.data.tobytes())
        for r in b.relocs:
            struct.pack_into("<Q", data, r.offset, addresses[r.target] + r.target_offset)
        memory.write(addresses[b.name], bytes(data))
    info = program.kernels[spec.kernel]
    params = bytearray(info.param_size)
    assert len(info.params) == len(spec.args)
    for arg, layout in zip(spec.args, info.params, strict=True):
        if isinstance(arg, Buffer):
            raw = struct.pack("<Q", addresses[arg.name])
        elif isinstance(arg, Scalar):
            raw = arg.value.tobytes()
        else:
            raw = arg.data
        assert len(raw) <= layout.size
        params[layout.offset:layout.offset + len(raw)] = raw
    out = io.StringIO()
    observers = [Oracle(memory)] if oracle else []
    program.launch(spec.kernel, spec.grid, spec.block, spec.shared_bytes, bytes(params),
                   observers=observers, stdout=out)
    outputs = {
        b.name: np.frombuffer(memory.read(addresses[b.name], b.nbytes), dtype=b.data.dtype)
        for b in spec.buffers if b.output
    }
    violations = observers[0].violations if oracle else []
    return outputs, out.getvalue(), violations


def check_spec(spec: KernelSpec, ptx: str) -> None:
    outputs, stdout, violations = run_spec(spec, ptx)
    assert violations == [], f"the oracle flagged a correct kernel: {violations[:3]}"
    errors = spec.check(outputs)
    assert errors == []
    if spec.stdout is not None:
        if spec.stdout_unordered:
            assert sorted(stdout.splitlines()) == sorted(spec.stdout.splitlines())
        else:
            assert stdout == spec.stdout


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_spec_kernel_matches_reference(spec: KernelSpec, variant: str) -> None:
    ptx = compile_kernel_file(spec.file, "compute_75", VARIANTS[variant])
    check_spec(spec, ptx)


_ARCH_SPECS = [s for s in SPECS if s.kernel in ARCH_DEPENDENT]


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
@pytest.mark.parametrize("spec", _ARCH_SPECS, ids=[s.name for s in _ARCH_SPECS])
def test_arch_dependent_kernel_matches_reference(spec: KernelSpec, arch: str) -> None:
    """redux.sync and bf16 fma only appear in PTX for sm_80 and newer."""
    for options in VARIANTS.values():
        check_spec(spec, compile_kernel_file(spec.file, arch, options))


@pytest.mark.parametrize("kernel", ["vector_add", "atomic_cas_loops", "warp_shuffles"])
def test_spec_kernel_runs_without_oracle(kernel: str) -> None:
    spec = next(s for s in SPECS if s.kernel == kernel)
    outputs, _, _ = run_spec(spec, compile_kernel_file(spec.file), oracle=False)
    assert spec.check(outputs) == []


# ---------------------------------------------------------------------------
# numba kernels (numba.cuda.compile_ptx through NVVM)


def _numba_array(a: np.ndarray, address: int) -> bytes:
    """numba's array ABI: meminfo, parent, nitems, itemsize, data, shape..., strides..."""
    fields = [0, 0, a.size, a.itemsize, address, *a.shape, *a.strides]
    return struct.pack(f"<{len(fields)}q", *[f if f < 2**63 else f - 2**64 for f in fields])


def _numba_launch(module_name: str, args: list, grid: tuple, block: tuple) -> list[np.ndarray]:
    module = next(m for m in numba_modules() if m.name == module_name)
    memory = DeviceMemory()
    program = Program(module.ptx, memory)
    (kernel,) = module.entries
    info = program.kernels[kernel]
    raw = b""
    addresses = []
    for a in args:
        if isinstance(a, np.ndarray):
            address = memory.alloc(max(a.nbytes, 1))
            memory.write(address, a)
            addresses.append(address)
            raw += _numba_array(a, address)
        else:
            raw += np.asarray(a).tobytes()
            addresses.append(None)
    params = bytearray(info.param_size)
    offset = 0
    for layout in info.params:  # numba parameters are 8- or 4-byte scalars in order
        offset = layout.offset
        params[offset:offset + layout.size] = raw[:layout.size]
        raw = raw[layout.size:]
    assert raw == b""
    oracle = Oracle(memory)
    program.launch(kernel, grid, block, 0, bytes(params), observers=[oracle])
    assert oracle.violations == []
    return [np.frombuffer(memory.read(addr, a.nbytes), dtype=a.dtype).reshape(a.shape)
            if addr is not None else None for a, addr in zip(args, addresses, strict=True)]


def _label(name: str, *opts: str) -> str:
    return f"numba:{name}[{','.join(['sm_75', *opts])}]"


@pytest.mark.parametrize("opts", [(), ("debug",)])
def test_numba_vec_add(opts) -> None:
    rg = np.random.default_rng(1)
    a = rg.standard_normal(1000).astype(np.float32)
    b = rg.standard_normal(1000).astype(np.float32)
    out = np.zeros(1000, np.float32)
    got = _numba_launch(_label("numba_vec_add", *opts), [out, a, b], (8, 1, 1), (128, 1, 1))
    np.testing.assert_array_equal(got[0], a + b)


def test_numba_saxpy_2d() -> None:
    rg = np.random.default_rng(2)
    x = rg.standard_normal((20, 33)).astype(np.float32)
    y = rg.standard_normal((20, 33)).astype(np.float32)
    out = np.zeros((20, 33), np.float32)
    got = _numba_launch(_label("numba_saxpy_2d"), [out, x, y, np.float32(1.5)], (3, 5, 1), (8, 8, 1))
    fused = (1.5 * x.astype(np.float64) + y).astype(np.float32)  # fma contraction
    np.testing.assert_array_equal(got[0], fused)


def test_numba_shared_reverse() -> None:
    inp = np.arange(512, dtype=np.float32)
    out = np.zeros(512, np.float32)
    got = _numba_launch(_label("numba_shared_reverse"), [out, inp], (4, 1, 1), (128, 1, 1))
    np.testing.assert_array_equal(got[0], inp.reshape(4, 128)[:, ::-1].reshape(-1))


@pytest.mark.parametrize("opts", [(), ("lineinfo",)])
def test_numba_block_reduce(opts) -> None:
    inp = (np.arange(1000) % 17).astype(np.float32)
    out = np.zeros(4, np.float32)
    got = _numba_launch(_label("numba_block_reduce", *opts), [out, inp], (4, 1, 1), (256, 1, 1))
    padded = np.concatenate([inp, np.zeros(24, np.float32)])
    np.testing.assert_array_equal(got[0], padded.reshape(4, 256).sum(axis=1))


def test_numba_atomics() -> None:
    vals = (np.arange(700) * 7 % 101).astype(np.int32)
    hist = np.zeros(16, np.int32)
    total = np.zeros(1, np.float32)
    mx = np.zeros(1, np.int32)
    got = _numba_launch(_label("numba_atomics"), [hist, total, mx, vals], (6, 1, 1), (128, 1, 1))
    np.testing.assert_array_equal(got[0], np.bincount(vals % 16, minlength=16))
    assert got[1][0] == np.float32(vals.sum() * 0.5)
    assert got[2][0] == vals.max()


def test_numba_math() -> None:
    x = np.linspace(-3, 3, 300)
    out = np.zeros(300)
    got = _numba_launch(_label("numba_math"), [out, x], (3, 1, 1), (128, 1, 1))
    ref = np.sin(x) * np.exp(-x) + np.sqrt(np.abs(x)) + np.log1p(np.abs(x)) + np.tanh(x)
    np.testing.assert_allclose(got[0], ref, rtol=1e-13)


def test_numba_warp_vote() -> None:
    inp = (np.arange(96) % 5 - 2).astype(np.int32)
    out = np.zeros(96, np.int32)
    got = _numba_launch(_label("numba_warp_vote"), [out, inp], (1, 1, 1), (96, 1, 1))
    ref = np.empty(96, np.int32)
    for w in range(3):
        seg = inp[32 * w:32 * w + 32]
        pop = int((seg > 0).sum())
        down = np.concatenate([seg[1:], seg[-1:]])
        ref[32 * w:32 * w + 32] = pop + down
    np.testing.assert_array_equal(got[0], ref)


def test_numba_kernel_calling_device_functions() -> None:
    x = np.linspace(-2, 2, 200).astype(np.float32)
    out = np.zeros(200, np.float32)
    got = _numba_launch(_label("numba_uses_devfn"), [out, x, np.float32(-1), np.float32(4)],
                        (2, 1, 1), (128, 1, 1))
    half, one, two, three = (np.float32(v) for v in (0.5, 1.0, 2.0, 3.0))
    poly = ((x * half + one) * x - two) * x + three
    np.testing.assert_allclose(got[0], np.clip(poly, -1, 4), rtol=1e-6)
    assert math.isfinite(float(got[0].sum()))


# ---------------------------------------------------------------------------
# every module of the corpus decodes; the LLVM NVPTX kernels run


def test_every_corpus_function_decodes() -> None:
    """No instruction of any corpus module (NVRTC for every arch and option set,
    numba, LLVM) is unsupported by the CPU device."""
    from gpusafe_testkit.corpus import corpus_modules

    problems = []
    for module in corpus_modules():
        program = Program(module.ptx, DeviceMemory())
        for function in program.module.functions:
            if function.body is not None:
                for line, opcode, reason in program.code(function.name).errors:
                    problems.append(f"{module.name}: {function.name}: line {line}: {opcode}: {reason}")
    assert problems == []


def _llvm(name: str) -> tuple[Program, DeviceMemory]:
    from gpusafe_testkit.corpus import llvm_modules

    module = next(m for m in llvm_modules() if m.source == name)
    memory = DeviceMemory()
    return Program(module.ptx, memory), memory


def test_llvm_saxpy() -> None:
    program, memory = _llvm("llvm_saxpy")
    n = 1000
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 0.5, np.float32)
    pa, pb, po = (memory.alloc(4 * n) for _ in range(3))
    memory.write(pa, a)
    memory.write(pb, b)
    params = struct.pack("<QQQfi", po, pa, pb, 2.0, n)
    program.launch("llvm_saxpy", (4, 1, 1), (256, 1, 1), 0, params)
    np.testing.assert_array_equal(np.frombuffer(memory.read(po, 4 * n), np.float32), a * 2 + b)


def test_llvm_block_sum_with_a_device_function() -> None:
    program, memory = _llvm("llvm_block_sum")
    inp = (np.arange(3 * 128) % 11).astype(np.int32)
    pi, po = memory.alloc(inp.nbytes), memory.alloc(12)
    memory.write(pi, inp)
    program.launch("llvm_block_sum", (3, 1, 1), (128, 1, 1), 0, struct.pack("<QQ", po, pi))
    ref = (inp.reshape(3, 128).astype(np.int64) ** 2 + 1).sum(1)
    np.testing.assert_array_equal(np.frombuffer(memory.read(po, 12), np.int32), ref)


def test_llvm_atomic_count_through_generic_pointers() -> None:
    program, memory = _llvm("llvm_atomic_count")
    vals = (np.arange(500) * 7919 % 1000).astype(np.int64)
    pc, pv = memory.alloc(4 * 10), memory.alloc(vals.nbytes)
    memory.write(pv, vals)
    memory.write(pc, np.zeros(10, np.int32))
    program.launch("llvm_atomic_count", (2, 1, 1), (256, 1, 1), 0,
                   struct.pack("<QQqq", pc, pv, 500, 10))
    np.testing.assert_array_equal(np.frombuffer(memory.read(pc, 40), np.int32),
                                  np.bincount(vals % 10, minlength=10))

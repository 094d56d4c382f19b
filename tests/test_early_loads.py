"""Global loads moved above a local array's filling (``checks/early_loads``,
issue 14): which moves are made, which are refused because they could change
what the program does, that every instruction keeps its source place, and
that a bad access the move does not make good is still reported."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gpusafe_instrument import ptx, query
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.checks.early_loads import hoist_loads
from gpusafe_instrument.nodes import Instruction
from gpusafe_instrument.printer import emit

HEAD = """.version 8.0
.target sm_75
.address_size 64

.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
	.local .align 16 .b8 __local_depot0[64];
	.reg .pred %p<4>;
	.reg .b32 %r<32>;
	.reg .b64 %rd<32>;
	mov.u64 %rd5, __local_depot0;
	ld.param.u64 %rd1, [k_param_0];
	ld.param.u64 %rd2, [k_param_1];
	ld.global.u32 %r1, [%rd1];
"""
FILL = """	shl.b32 %r2, %r1, 1;
	add.s32 %r3, %r1, 7;
	st.local.v2.u32 [%rd5], {%r2, %r3};
"""
READ = """	and.b32 %r5, %r4, 4;
	cvt.u64.u32 %rd7, %r5;
	add.s64 %rd8, %rd5, %rd7;
	ld.local.u32 %r6, [%rd8];
	st.global.u32 [%rd1], %r6;
	ret;
}
"""
LOAD = """	add.s64 %rd6, %rd2, 4;
	ld.global.u32 %r4, [%rd6];
"""


def _order(body_text: str) -> list[str]:
    """The kernel's instructions, after the pass, as text."""
    module = ptx.parse(HEAD + body_text)
    fn = module.functions[0]
    assert fn.body is not None
    hoist_loads(fn.body)
    return [s.canonical() for s in fn.body if type(s) is Instruction]


def _before_fill(order: list[str]) -> bool:
    load = next(i for i, t in enumerate(order) if t.startswith("ld.global.u32 \t%r4"))
    fill = next(i for i, t in enumerate(order) if t.startswith("st.local"))
    return load < fill


def test_a_load_between_a_local_arrays_filling_and_its_reading_moves_above_the_filling():
    order = _order(FILL + LOAD + READ)
    assert _before_fill(order)
    # its address comes along, and the filling keeps its own order
    assert order.index("add.s64 \t%rd6, %rd2, 4;") < order.index(
        next(t for t in order if t.startswith("ld.global.u32 \t%r4")))
    fill = [t for t in order if t.startswith(("shl", "add.s32", "st.local"))]
    assert fill == ["shl.b32 \t%r2, %r1, 1;", "add.s32 \t%r3, %r1, 7;",
                    "st.local.v2.u32 \t[%rd5], {%r2, %r3};"]


def test_without_a_read_back_after_it_the_load_stays():
    order = _order(FILL + LOAD + "\tst.global.u32 [%rd1], %r4;\n\tret;\n}\n")
    assert not _before_fill(order)


@pytest.mark.parametrize("between, blocker, why", [
    ("\tst.global.u32 [%rd2], %r1;\n", 0, "a global store may write what it reads"),
    ("\tst.u32 [%rd2], %r1;\n", 0, "a generic store may write global memory"),
    ("\tatom.global.add.u32 %r9, [%rd2], 1;\n", 0, "an atomic orders memory"),
    ("\tmembar.gl;\n", 0, "a fence orders memory"),
    ("\tbar.sync 0;\n", 0, "a barrier orders memory"),
    ("\tld.global.u32 %r9, [%rd2+8];\n", 0, "loads keep their order"),
    ("\tmov.u32 %r4, 3;\n\tst.local.u32 [%rd5+8], %r4;\n", 1, "it writes a register read above"),
    ("\tst.local.u32 [%rd5+8], %r2;\n\tadd.s32 %r10, %r2, 1;\n\tst.global.u32 [%rd1+4], %r10;\n",
     1, "arithmetic whose result is used elsewhere"),
    ("\tmov.u32 %r11, %clock;\n\tst.local.u32 [%rd5+8], %r11;\n", 0, "a clock read"),
])
def test_the_load_passes_nothing_it_could_interact_with(between, blocker, why):
    order = _order(FILL + between + LOAD + READ)
    load = next(i for i, t in enumerate(order) if t.startswith("ld.global.u32 \t%r4"))
    stays = [s.canonical() for s in ptx.parse(HEAD + between + "\tret;\n}\n").functions[0].body
             if type(s) is Instruction][4 + blocker]
    assert order.index(stays) < load, why


def test_an_array_update_is_not_passed():
    # the array's value read back, incremented and stored: moving the load
    # above the store would hold the value read across the load's check
    update = ("\tld.local.u32 %r12, [%rd5+4];\n\tadd.s32 %r13, %r12, 1;\n"
              "\tst.local.u32 [%rd5+4], %r13;\n")
    order = _order(update + LOAD + READ)
    assert order.index("st.local.u32 \t[%rd5+4], %r13;") < order.index(
        next(t for t in order if t.startswith("ld.global.u32 \t%r4")))


@pytest.mark.parametrize("load", [
    "\tld.volatile.global.u32 %r4, [%rd6];\n",
    "\tld.relaxed.gpu.global.u32 %r4, [%rd6];\n",
    "\tld.u32 %r4, [%rd6];\n",  # generic: it may read the local array
])
def test_only_weak_global_loads_move(load):
    order = _order(FILL + "\tadd.s64 %rd6, %rd2, 4;\n" + load + READ)
    first_store = next(i for i, t in enumerate(order) if t.startswith("st.local"))
    moved = next(i for i, t in enumerate(order) if "%r4, [%rd6]" in t)
    assert moved > first_store


def test_a_predicated_load_keeps_the_old_value_where_its_guard_is_false():
    # @%p1 ld %r2 ... : %r2 is also read (the old value stays where %p1 is
    # false), so it cannot move above the instruction defining that value
    order = _order(FILL + "\tsetp.ne.s32 %p1, %r1, 0;\n\tadd.s64 %rd6, %rd2, 4;\n"
                   "\t@%p1 ld.global.u32 %r2, [%rd6];\n\tmov.u32 %r4, %r2;\n" + READ)
    assert order.index("shl.b32 \t%r2, %r1, 1;") < order.index(
        "@%p1 ld.global.u32 \t%r2, [%rd6];")


INLINED = """	.loc 1 10 1
	shl.b32 %r2, %r1, 1;
	add.s32 %r3, %r1, 7;
	st.local.v2.u32 [%rd5], {%r2, %r3};
	.loc 1 20 1
	.loc 1 5 1, function_name $L__info_string0, inlined_at 1 20 1
	add.s64 %rd6, %rd2, 4;
	ld.global.u32 %r4, [%rd6];
	.loc 1 21 1
""" + READ + """	.file 1 "k.cu"
	.section .debug_str
	{
$L__info_string0:
.b8 112,0
	}
"""


@pytest.mark.slow
def test_a_moved_inlined_load_is_written_after_the_place_its_inlined_at_names():
    from gpusafe_testkit.corpus import ptxas

    module = ptx.parse(HEAD + INLINED)
    fn = module.functions[0]
    before = {id(i): loc for _, i, loc in query.located_instructions(module, fn)}
    assert fn.body is not None
    hoist_loads(fn.body)
    order = [s.canonical() for s in fn.body if type(s) is Instruction]
    assert _before_fill(order)
    after = {id(i): loc for _, i, loc in query.located_instructions(module, fn)}
    assert after == before  # every instruction under the .loc it had
    # the call's place (1 20 1) is named before the inlined load's .loc
    text = emit(module)
    named = re.search(r"\.loc\s+1 20 1\n", text)
    assert named and named.start() < text.index("inlined_at 1 20 1")
    ptxas(text, "sm_75")  # it refuses an inlined_at place no .loc before named


# --------------------------------------------------------------------------
# compiled kernels


LOCAL_MEM = (Path(__file__).parent / "kernels" / "local_mem.cu").read_text()
"""The corpus's local-array kernels, ``local_array_dynamic_index`` among them
(a 16-int table filled from ``in[i]``, read at ``idx[i]``)."""

TABLE = LOCAL_MEM + r"""
__device__ __forceinline__ int pick(const int* idx, int i, int v)
{
    int table[16];
    for (int k = 0; k < 16; ++k) table[k] = v * k + (k ^ 5);
    int j = idx[i];
    return table[j & 15] + table[(j >> 4) & 15];
}

extern "C" __global__ void table_inlined(int* out, const int* in, const int* idx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = pick(idx, i, in[i]);
}
"""
TABLE_KERNELS = ("local_array_dynamic_index", "table_inlined")


def _moved(text: str, kernel: str) -> bool:
    module = ptx.parse(text)
    fn = next(f for f in module.functions if f.name == kernel)
    assert fn.body is not None
    before = [s for s in fn.body if type(s) is Instruction]
    hoist_loads(fn.body)
    return before != [s for s in fn.body if type(s) is Instruction]


@pytest.mark.slow
@pytest.mark.parametrize("arch, sm", [("compute_75", "sm_75"), ("compute_80", "sm_80"),
                                      ("compute_90", "sm_90")])
@pytest.mark.parametrize("options", [(), ("-lineinfo",)])
def test_the_table_kernels_keep_their_registers_and_their_source_places(arch, sm, options):
    from gpusafe_testkit.corpus import nvrtc_compile, ptxas

    text = nvrtc_compile(TABLE, "k.cu", arch, options)
    assert all(_moved(text, kernel) for kernel in TABLE_KERNELS)
    checked = instrument(text)
    plain = ptxas(text, sm, verbose=True).registers()
    regs = ptxas(checked.ptx, sm, verbose=True).registers()  # ptxas takes every .loc
    for kernel in TABLE_KERNELS:
        # without the move: 30 (16-18 unchecked); with it, 20
        assert regs[kernel] <= plain[kernel] + 4, (kernel, plain[kernel], regs[kernel])
    # every site names the source place of its instruction in the input
    module = ptx.parse(text)
    places = {instr.line: loc for fn in module.functions
              for _, instr, loc in query.located_instructions(module, fn)}
    sites = checked.sites.sites
    assert sites
    for site in sites:
        loc = places[site.ptx_line]
        got = None if site.line is None else (site.file, site.line, site.column)
        want = None if loc is None else (loc.file, loc.line, loc.column)
        assert got == want, site


@pytest.mark.slow
@pytest.mark.parametrize("kernel", TABLE_KERNELS)
@pytest.mark.parametrize("short", [1, 2])
def test_a_short_array_read_by_a_moved_load_is_still_reported(kernel, short):
    from test_instrument_cpu import Buf, assert_same, kinds, run_both

    n = 64
    rng = np.random.default_rng(7)
    arrays = [np.zeros(n, np.int32), rng.integers(0, 100, n, dtype=np.int32),
              rng.integers(0, 1 << 8, n, dtype=np.int32)]
    arrays[short] = arrays[short][: n - 5]  # `in` or `idx` 5 elements short
    o = run_both(TABLE, kernel, (2, 1, 1), (32, 1, 1),
                 [Buf(a) for a in arrays] + [np.int32(n)], arch="compute_80")
    assert kinds(o) == {"global-out-of-bounds"}
    assert o.occurrences == 5
    assert_same(o)  # same PTX lines, addresses, threads and outputs as the oracle

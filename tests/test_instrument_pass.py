"""The pass on small hand-written modules: what it inserts, what it refuses,
the site table, the statistics, the launch-context convention, and the
``gpusafe instrument`` command."""

from __future__ import annotations

import argparse
import json

import pytest

from gpusafe.commands.instrument import add_parser
from gpusafe_instrument import ptx
from gpusafe_instrument.checks import InstrumentError, instrument
from gpusafe_instrument.runtime import CHECK_FUNCTION, CONTEXT_PARAM
from gpusafe_instrument.sites import SiteTable
from gpusafe_testkit.corpus import nvrtc_compile, ptxas


def _context_last(fn) -> bool:
    """The launch context is the last hidden parameter but the check slots'
    limits (``emission.limits_as_params``) and the windows of pointer
    arguments (``arguments``)."""
    names = [p.name for p in fn.params if not p.name.startswith(("__gpusafe_lim",
                                                                 "__gpusafe_w"))]
    return names[-1] == CONTEXT_PARAM


HEAD = ".version 7.0\n.target sm_75\n.address_size 64\n"

KERNEL = HEAD + """
.visible .entry k(
	.param .u64 k_param_0,
	.param .align 8 .b8 k_param_1[16]
)
{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<8>;
	.shared .align 4 .b8 tile[64];

	.loc	1 7 3
	ld.param.u64 	%rd1, [k_param_0];
	ld.param.u64 	%rd2, [k_param_1+8];
	cvta.to.global.u64 	%rd3, %rd1;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd4, %r1, 4;
	add.s64 	%rd5, %rd3, %rd4;
	ld.global.u32 	%r2, [%rd5];
	st.shared.u32 	[tile+8], %r2;
	cvta.to.global.u64 	%rd6, %rd2;
	add.s64 	%rd7, %rd6, %rd4;
	st.global.u32 	[%rd7+4], %r2;
	ret;
}
"""
KERNEL = KERNEL.replace(HEAD, HEAD + '.file\t1 "k.cu"\n')


def test_every_kernel_gets_one_hidden_trailing_parameter():
    r = instrument(KERNEL)
    out = ptx.parse(r.ptx)
    k = out.function("k")
    assert _context_last(k)
    # the documented ABI: one .u64 holding the launch context's address
    info = r.sites.kernels["k"]
    assert (k.params[-1].type, k.params[-1].dims) == (".u64", ())
    limits = len(info.hidden_limit_offsets)  # the slots' limits follow it
    assert info.param_buffer_size == info.context_param_offset + 8 + 8 * limits
    assert len(k.params) == 3 + limits


def test_the_result_assembles():
    ptxas(instrument(KERNEL).ptx, "sm_75")


def test_struct_parameter_pointers_are_roots():
    r = instrument(KERNEL)
    info = r.sites.kernels["k"]
    roots = {(x.param, x.offset) for x in info.roots}
    assert roots == {("k_param_0", 0), ("k_param_1", 8)}
    assert info.context_param_offset == 24
    assert {s.check for s in r.sites.sites} == {"root"}


def test_constant_offsets_inside_a_variable_need_no_check():
    stats = instrument(KERNEL).stats["k"]
    assert stats.removed["static-in-bounds"] == 1
    assert stats.checks["root"] == 2
    assert stats.unchecked["param"] == 2
    assert stats.memory_instructions == 5


def test_the_site_table_names_instruction_line_and_source():
    r = instrument(KERNEL)
    site = r.sites.sites[0]
    assert site.function == "k"
    assert site.instruction.startswith("ld.global.u32")
    assert KERNEL.splitlines()[site.ptx_line - 1].strip().startswith("ld.global.u32")
    assert (site.file, site.line, site.column) == ("k.cu", 7, 3)
    assert (site.access, site.width, site.space) == ("read", 4, "global")
    again = SiteTable.from_json(r.sites.to_json())
    assert again.sites == r.sites.sites
    assert again.kernels == r.sites.kernels


def test_instrumenting_twice_is_refused():
    once = instrument(KERNEL).ptx
    with pytest.raises(InstrumentError, match="already instrumented"):
        instrument(once)


def test_a_module_defining_a_runtime_symbol_is_refused():
    text = HEAD + ".visible .func __gpusafe_check()\n{\n\tret;\n}\n"
    with pytest.raises(InstrumentError, match="already instrumented"):
        instrument(text)


def test_32_bit_modules_are_refused():
    with pytest.raises(InstrumentError, match="64-bit"):
        instrument(".version 7.0\n.target sm_75\n.address_size 32\n")


UNCHECKABLE = HEAD + """
.visible .entry p(.param .u64 p_param_0)
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<2>;
	ld.param.u64 	%rd1, [p_param_0];
	cvt.u32.u64 	%r1, %rd1;
	ldmatrix.sync.aligned.m8n8.x1.shared.b16 	{%r2}, [%r1];
	ret;
}

.visible .entry plain(.param .u64 plain_param_0)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<3>;
	ld.param.u64 	%rd1, [plain_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.global.u32 	%r1, [%rd2];
	ret;
}
"""


def test_an_instruction_the_pass_cannot_check_leaves_its_kernel_unchecked_with_its_line():
    r = instrument(UNCHECKABLE)
    why = r.sites.unchecked["p"]
    assert why.startswith("PTX line 11: cannot check `ldmatrix.sync.aligned.m8n8.x1.shared.b16")
    assert "ldmatrix" in why.split("`: ", 1)[1]
    assert "p" not in r.sites.kernels and "p" not in r.stats


def test_an_unchecked_kernel_keeps_its_signature_and_body():
    r = instrument(UNCHECKABLE)
    before, after = ptx.parse(UNCHECKABLE).function("p"), ptx.parse(r.ptx).function("p")
    assert after.params == before.params
    assert after.body == before.body
    ptxas(r.ptx, "sm_75")


def test_the_other_kernels_of_the_module_are_checked():
    r = instrument(UNCHECKABLE)
    assert set(r.sites.kernels) == {"plain"}
    assert [s.function for s in r.sites.sites] == ["plain"]
    assert _context_last(ptx.parse(r.ptx).function("plain"))
    again = SiteTable.from_json(r.sites.to_json())
    assert again.unchecked == r.sites.unchecked


def test_a_prefetch_is_accepted_and_not_checked():
    text = HEAD + """
.visible .entry f(.param .u64 f_param_0)
{
	.reg .b64 	%rd<2>;
	ld.param.u64 	%rd1, [f_param_0];
	prefetch.global.L2 	[%rd1];
	prefetchu.L1 	[%rd1];
	ret;
}
"""
    r = instrument(text)
    assert r.sites.unchecked == {}
    assert "f" in r.sites.kernels and len(r.sites) == 0
    ptxas(r.ptx, "sm_75")


CALLS = r"""
__device__ __noinline__ float get(const float* p, int i) { return p[i]; }
__device__ __noinline__ int twice(int x) { return 2 * x; }
extern "C" __global__ void k(float* out, const float* in)
{
    int i = threadIdx.x;
    out[i] = get(in, twice(i));
}
"""


def test_device_functions_that_check_get_the_context_and_their_callers_pass_it():
    r = instrument(nvrtc_compile(CALLS, "calls.cu"))
    m = ptx.parse(r.ptx)
    get = m.function("_Z3getPKfi")
    twice = m.function("_Z5twicei")
    assert _context_last(get)
    assert all(p.name != CONTEXT_PARAM for p in twice.params)
    k = m.function("k")
    text = r.ptx[r.ptx.index(".entry k"):]
    call = next(line for line in text.splitlines() if "_Z3getPKfi" in line and "call" in line)
    assert "__gs_ctxarg" in call or "__gs_ctxarg" in text
    assert _context_last(k)
    ptxas(r.ptx, "sm_75")


def test_the_runtime_is_linked_once_under_its_prefix():
    r = instrument(KERNEL)
    m = ptx.parse(r.ptx)
    names = [f.name for f in m.functions]
    assert names.count(CHECK_FUNCTION) == 1
    assert m.version.text == "7.0"  # the module keeps its own version and target


def test_guarded_accesses_keep_their_guard_in_the_slow_path():
    text = HEAD + """
.visible .entry g(.param .u64 g_param_0)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<2>;
	ld.param.u64 	%rd1, [g_param_0];
	mov.u32 	%r1, %tid.x;
	setp.lt.u32 	%p1, %r1, 4;
	@%p1 st.global.u32 	[%rd1], %r1;
	ret;
}
"""
    out = instrument(text).ptx
    assert "@!%p1 bra" in out
    ptxas(out, "sm_75")


# -- the command -------------------------------------------------------------


def _cli(argv):
    ap = argparse.ArgumentParser(prog="gpusafe")
    add_parser(ap.add_subparsers())
    args = ap.parse_args(argv)
    return args.func(args)


def test_command_writes_ptx_and_sites(tmp_path, capsys):
    src = tmp_path / "in.ptx"
    src.write_text(KERNEL)
    out, sites = tmp_path / "out.ptx", tmp_path / "sites.json"
    assert _cli(["instrument", str(src), "-o", str(out), "--sites", str(sites), "--stats"]) == 0
    assert CONTEXT_PARAM in out.read_text()
    assert json.loads(sites.read_text())["schema"] == "gpusafe-sites/1"
    assert "root" in capsys.readouterr().out


def test_command_refuses_its_own_output_with_status_2(tmp_path, capsys):
    src = tmp_path / "in.ptx"
    src.write_text(instrument(KERNEL).ptx)
    assert _cli(["instrument", str(src), "-o", str(tmp_path / "o.ptx")]) == 2
    err = capsys.readouterr().err
    assert "already instrumented" in err and "Traceback" not in err


def test_command_reports_a_parse_error_with_status_2(tmp_path, capsys):
    src = tmp_path / "bad.ptx"
    src.write_text(HEAD + ".visible .entry k(\n{\n")
    assert _cli(["instrument", str(src), "-o", str(tmp_path / "o.ptx")]) == 2
    assert "bad.ptx" in capsys.readouterr().err


def test_command_reports_an_unreadable_file_with_status_2(tmp_path, capsys):
    assert _cli(["instrument", str(tmp_path / "none.ptx"), "-o", str(tmp_path / "o.ptx")]) == 2
    assert "cannot read" in capsys.readouterr().err

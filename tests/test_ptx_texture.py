"""Texture and surface instructions, as NVRTC writes them for texture and
surface objects (``cudaTextureObject_t``, ``cudaSurfaceObject_t``): the
bracketed ``[object, {coordinates}]`` operand parses into a
:class:`TextureOperand`, prints back exactly, reparses to the same tree from
its canonical printing, which ptxas accepts; the pass checks such kernels,
with texture fetches (which cannot fault) not counted as accesses and surface
accesses (bounded by the hardware, in arrays gpusafe does not track) counted
as not checked."""

from __future__ import annotations

import re

import pytest

from gpusafe_instrument import ptx, query
from gpusafe_instrument.checks import instrument
from gpusafe_instrument.nodes import (
    Address,
    Block,
    Function,
    Register,
    RegisterDecl,
    Symbol,
    TextureOperand,
    Vector,
)
from gpusafe_testkit.corpus import nvrtc_compile, ptxas

TEXTURES = r"""
extern "C" __global__ void sample2d(float4* out, cudaTextureObject_t tex, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float4>(tex, x + 0.5f, y + 0.5f);
}

extern "C" __global__ void fetch1d(float* out, cudaTextureObject_t tex, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float>(tex, i);
}

extern "C" __global__ void surface_copy(cudaSurfaceObject_t src, cudaSurfaceObject_t dst,
                                        int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y;
    if (x < w && y < h) {
        uchar4 v = surf2Dread<uchar4>(src, x * 4, y, cudaBoundaryModeClamp);
        surf2Dwrite(v, dst, x * 4, y, cudaBoundaryModeZero);
        surf2Dwrite(v, dst, x * 4, y);
    }
}

extern "C" __global__ void cube(float4* out, cudaTextureObject_t tex, float s)
{
    int i = threadIdx.x;
    out[i] = texCubemap<float4>(tex, s, i * 0.1f, 1.0f);
}

extern "C" __global__ void layered(float* out, cudaTextureObject_t tex, int layer)
{
    int i = threadIdx.x;
    out[i] = tex2DLayered<float>(tex, i + 0.5f, 0.5f, layer);
}

extern "C" __global__ void gather(float4* out, cudaTextureObject_t tex)
{
    int i = threadIdx.x;
    out[i] = tex2Dgather<float4>(tex, i + 0.5f, 0.5f, 1);
}
"""

GEOMETRIES = {"1d", "2d", "3d", "a1d", "a2d", "cube", "acube", "2dms", "a2dms"}

VARIANTS = [((), "compute_75"), (("-G",), "compute_75"), (("-lineinfo",), "compute_90")]


@pytest.fixture(scope="module", params=VARIANTS, ids=["O3", "G", "lineinfo-sm90"])
def compiled(request: pytest.FixtureRequest) -> tuple[str, str]:
    options, arch = request.param
    return nvrtc_compile(TEXTURES, "textures.cu", arch, options), "sm_" + arch.split("_")[1]


def _instructions(module: ptx.Module) -> list:
    return [i for f in module.functions for i in query.instructions(f)]


def _forget_source_text(module: ptx.Module) -> ptx.Module:
    def strip(statements):
        for s in statements:
            if type(s) is Block:
                strip(s.statements)
            else:
                object.__setattr__(s, "raw", None)

    for item in module.items:
        if type(item) is Function:
            item.header_raw = None
            if item.body is not None:
                strip(item.body)
        else:
            object.__setattr__(item, "raw", None)
    return module


def test_nvrtc_texture_and_surface_code_round_trips_exactly(compiled) -> None:
    text, _ = compiled
    module = ptx.parse(text)
    assert ptx.emit(module) == text
    ops = {i.op for i in _instructions(module)}
    assert {"tex", "tld4", "suld", "sust"} <= ops


def test_canonical_printing_reparses_and_ptxas_accepts_it(compiled) -> None:
    text, arch = compiled
    module = ptx.parse(text)
    canonical = ptx.emit(_forget_source_text(ptx.parse(text)))
    assert canonical != text
    assert ptx.parse(canonical) == module
    ptxas(canonical, arch)


def test_every_texture_shape_is_a_texture_operand(compiled) -> None:
    module = ptx.parse(compiled[0])
    seen = set()
    for instr in _instructions(module):
        if instr.op not in ("tex", "tld4", "suld", "sust"):
            continue
        (operand,) = [o for o in instr.operands if isinstance(o, TextureOperand)]
        handle, coords = operand.items
        assert isinstance(handle, Register) and isinstance(coords, Vector)
        geometry = next(m for m in instr.modifiers if m in GEOMETRIES)
        seen.add((instr.op, geometry, len(coords.items)))
    # the array coordinate of tex.a2d is an integer register first: {%r, %f, %f, %f}
    assert {("tex", "2d", 2), ("tex", "1d", 1), ("tex", "cube", 4), ("tex", "a2d", 4),
            ("tld4", "2d", 2), ("suld", "2d", 2), ("sust", "2d", 2)} <= seen


def test_texture_fetches_are_not_accesses_and_surface_accesses_are(compiled) -> None:
    module = ptx.parse(compiled[0])
    for instr in _instructions(module):
        accesses = query.instruction_accesses(instr)
        if instr.op in ("tex", "tld4"):
            assert accesses == ()
        elif instr.op in ("suld", "sust"):
            (access,) = accesses
            assert access.space == "surface" and access.width == 4
            assert str(access.kind) == ("read" if instr.op == "suld" else "write")


def test_kernels_with_textures_and_surfaces_are_checked(compiled) -> None:
    text, arch = compiled
    result = instrument(text)
    assert result.sites.unchecked == {}
    assert set(result.sites.kernels) == {
        "sample2d", "fetch1d", "surface_copy", "cube", "layered", "gather"}
    # at -G the surface reads and writes are in device functions of their own
    surface = sum(1 for i in _instructions(ptx.parse(text)) if i.op in ("suld", "sust"))
    assert surface >= 3  # a read and two writes
    assert sum(s.unchecked["surface"] for s in result.stats.values()) == surface
    assert result.stats["sample2d"].unchecked["surface"] == 0
    assert result.stats["sample2d"].checks["root"] >= 1  # the store to out[] is checked
    ptxas(result.ptx, arch)


HAND_WRITTEN = """.version 8.5
.target sm_75
.address_size 64

.global .texref tex_a;
.global .surfref surf_a;

.visible .entry queries(
	.param .u64 queries_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b16 	%rs<3>;
	.reg .b32 	%r<9>;
	.reg .f32 	%f<9>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [queries_param_0];
	txq.width.b32 	%r1, [tex_a];
	txq.height.b32 	%r2, [%rd1];
	suq.width.b32 	%r3, [surf_a];
	istypep.texref 	%p1, %rd1;
	tex.2d.v4.f32.f32 	{%f1, %f2, %f3, %f4}, [tex_a, {%f5, %f6}];
	tex.level.2d.v4.f32.f32 	{%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}], %f7;
	tex.grad.2d.v4.f32.f32 	{%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}], {%f7, %f8}, {%f7, %f8};
	tex.2d.v4.f32.f32 	{%f1, %f2, %f3, %f4}|%p1, [%rd1, {%f5, %f6}];
	sust.b.1d.b32.trap 	[surf_a, {%r1}], {%r2};
	sured.b.add.1d.u32.trap 	[surf_a, {%r1}], %r2;
	{.reg.b16 %rs9;
	mov.b16 	%rs9, 0;
	}
	{.reg .b32 %r9;
	mov.b32 	%r9, 0;
	}
	ret;

}
"""


def test_hand_written_texture_forms_round_trip_and_ptxas_accepts_them() -> None:
    module = ptx.parse(HAND_WRITTEN)
    assert ptx.emit(module) == HAND_WRITTEN
    canonical = ptx.emit(_forget_source_text(ptx.parse(HAND_WRITTEN)))
    assert ptx.parse(canonical) == module
    ptxas(HAND_WRITTEN, "sm_75")
    ptxas(canonical, "sm_75")
    body = module.function("queries").body
    by_op = {}
    for s in body:
        by_op.setdefault(getattr(s, "opcode", None), s)
    assert by_op["txq.width.b32"].operands[1] == Address(Symbol("tex_a"))
    fetched = by_op["tex.2d.v4.f32.f32"].operands[1]
    assert fetched == TextureOperand((Symbol("tex_a"), Vector((Register("%f5"),
                                                                 Register("%f6")))))
    glued, spaced = (s for s in body if type(s) is Block)
    assert glued.statements[0] == RegisterDecl(".b16", (("%rs9", None),))
    assert spaced.statements[0] == RegisterDecl(".b32", (("%r9", None),))


INDEPENDENT = """.version 8.5
.target sm_75, texmode_independent
.address_size 64

.global .texref tex_b;
.global .samplerref smp;

.visible .entry sampled(
	.param .u64 sampled_param_0
)
{
	.reg .f32 	%f<7>;

	tex.2d.v4.f32.f32 	{%f1, %f2, %f3, %f4}, [tex_b, smp, {%f5, %f6}];
	ret;

}
"""


def test_a_separate_sampler_is_the_middle_item() -> None:
    module = ptx.parse(INDEPENDENT)
    assert ptx.emit(module) == INDEPENDENT
    fetch = next(query.instructions(module.function("sampled")))
    assert fetch.operands[1] == TextureOperand((Symbol("tex_b"), Symbol("smp"), Vector((
        Register("%f5"), Register("%f6")))))
    canonical = ptx.emit(_forget_source_text(ptx.parse(INDEPENDENT)))
    assert ptx.parse(canonical) == module
    ptxas(canonical, "sm_75")
    result = instrument(INDEPENDENT)
    assert result.sites.unchecked == {} and "sampled" in result.sites.kernels
    ptxas(result.ptx, "sm_75")


def test_hand_written_queries_are_checked_and_surfaces_counted() -> None:
    result = instrument(HAND_WRITTEN)
    assert result.sites.unchecked == {}
    stats = result.stats["queries"]
    assert stats.unchecked["surface"] == 2  # sust and sured; txq, suq, tex: no access
    assert stats.unchecked["param"] == 1
    ptxas(result.ptx, "sm_75")


@pytest.mark.parametrize("operand, message", [
    ("[%rd1, {%f1, %f2}", "missing ']'"),
    ("[%rd1, [%rd1]]", "unexpected '['"),
    ("[%rd1, {%f1} %f2]", "expected ',' or ']'"),
])
def test_malformed_texture_operand_is_an_error(operand: str, message: str) -> None:
    text = HAND_WRITTEN.replace("[tex_a, {%f5, %f6}]", operand)
    with pytest.raises(ptx.ParseError, match=re.escape(message)) as e:
        ptx.parse(text)
    assert e.value.line == HAND_WRITTEN.split("\n").index(
        "\ttex.2d.v4.f32.f32 \t{%f1, %f2, %f3, %f4}, [tex_a, {%f5, %f6}];") + 1

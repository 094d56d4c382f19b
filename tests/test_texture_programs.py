"""Programs written the way cuda-python's examples are (``tests/programs/``),
for the textures and surfaces family of issue 10 (item 5): a cubemap
texture (simpleCubemapTexture), surface writes and reads
(simpleSurfaceWrite) and a 2D texture with linear filtering
(simpleTexture).  Each runs unchanged under ``gpusafe run --device cpu``,
passes its own result check with its kernels checked; a copy mutated to
write past its output buffer is reported at the kernel line of the
mutation, and a surface store outside the array with ``.trap`` is a device
fault naming the kernel and the line of the store.  Subprocesses: slow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from test_memory_kind_programs import install, kernel_line
from test_run_cli import gpusafe_run, line_of

pytestmark = pytest.mark.slow

FAMILIES = ["simple_cubemap_texture", "simple_surface_write", "simple_texture_linear"]


@pytest.mark.parametrize("name", FAMILIES)
def test_the_program_passes_with_its_kernels_checked(tmp_path: Path, name: str) -> None:
    app = install(tmp_path, name)
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 0, out
    assert "PASSED" in out, out
    assert doc["violations"] == [] and doc.get("faults", []) == []
    assert doc["summary"]["unimplemented_calls"] == 0
    assert doc["summary"]["kernels_checked"] >= 1 and doc["summary"]["launches"] >= 1


@dataclass(frozen=True)
class Mutation:
    program: str
    old: str  # the kernel line as written
    new: str  # the same line writing one element past the output
    allocated: str  # text of the program line that allocates the output


MUTATIONS = [
    Mutation("simple_cubemap_texture",
             "g_odata[face * width * width + y * width + x] = -texCubemap",
             "g_odata[face * width * width + y * width + x + 1] = -texCubemap",
             "d_data = checkCudaErrors(runtime.cudaMalloc(size))"),
    Mutation("simple_surface_write", "gOData[y * width + x] = value + 1.0f;",
             "gOData[y * width + x + 1] = value + 1.0f;",
             "d_output = checkCudaErrors(runtime.cudaMalloc(size))"),
    Mutation("simple_texture_linear", "outputData[y * width + x] = tex2D<float>(tex, u, v);",
             "outputData[y * width + x + 1] = tex2D<float>(tex, u, v);",
             "d_output = checkCudaErrors(runtime.cudaMalloc(size))"),
]


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: m.program)
def test_an_overflow_of_the_output_is_reported_at_its_line(tmp_path: Path, m: Mutation) -> None:
    app = install(tmp_path, m.program, [(m.old, m.new)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    (v,) = [v for v in doc["violations"] if v["kind"] == "global-out-of-bounds"]
    assert v["access"] == "write"
    assert v["location"]["file"].endswith(".cu")
    assert v["location"]["line"] == kernel_line(app, m.new)
    assert v["allocation"]["allocated_at"] == f"{app.name}:{line_of(app, m.allocated)}"


def test_a_surface_store_outside_the_array_with_trap_is_a_fault_at_its_line(
        tmp_path: Path) -> None:
    store = "surf2Dwrite(value, outputSurface, x * 4, y, cudaBoundaryModeTrap);"
    beyond = "surf2Dwrite(value, outputSurface, (x + 1) * 4, y, cudaBoundaryModeTrap);"
    app = install(tmp_path, "simple_surface_write", [(store, beyond)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc != 0 and "PASSED" not in out, out
    (fault,) = doc["faults"]
    assert fault["kernel"] == "surfaceWriteKernel"
    assert fault["error"] == "CUDA_ERROR_LAUNCH_FAILED"
    detail = fault["detail"]
    assert "sust outside its surface" in detail and "with .trap" in detail
    assert "x=192 bytes" in detail  # the first column past a 48-float row
    assert detail.endswith(f"simpleSurfaceWrite.cu:{kernel_line(app, beyond)})")


def test_the_same_store_with_zero_mode_is_dropped_as_the_hardware_does(tmp_path: Path) -> None:
    """``cudaBoundaryModeZero``: the store outside is not made, nothing faults;
    the program then finds its last column unwritten and fails its own check."""
    store = "surf2Dwrite(value, outputSurface, x * 4, y, cudaBoundaryModeTrap);"
    beyond = "surf2Dwrite(value, outputSurface, (x + 1) * 4, y, cudaBoundaryModeZero);"
    app = install(tmp_path, "simple_surface_write", [(store, beyond)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 1 and "simpleSurfaceWrite FAILED" in out, out
    assert doc.get("faults", []) == [] and doc["violations"] == []


def test_a_2d_copy_out_of_an_array_past_its_device_buffer_is_refused_and_reported(
        tmp_path: Path) -> None:
    copy = ("h_array, width * 4, cuArray, 0, 0, width * 4, height,\n"
            "        runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost)")
    past = ("d_input + 4, width * 4, cuArray, 0, 0, width * 4, height,\n"
            "        runtime.cudaMemcpyKind.cudaMemcpyDeviceToDevice)")
    app = install(tmp_path, "simple_surface_write", [(copy, past)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    (v,) = doc["violations"]
    assert v["kind"] == "api-out-of-bounds" and v["size"] == 48 * 40 * 4, v
    assert v["location"]["line"] == line_of(app, "runtime.cudaMemcpy2DFromArray(")
    assert v["allocation"]["allocated_at"] == \
        f"{app.name}:{line_of(app, 'd_input = checkCudaErrors(runtime.cudaMalloc(size))')}"

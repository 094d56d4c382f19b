"""Programs written the way cuda-python's examples are (``tests/programs/``),
one per family of issue 10 items 2-3, 6 and 7 (device attributes, zero-copy,
managed memory, stream-ordered allocation and pools, virtual memory
management, ``cp.async`` copies, float launch dimensions), run unchanged under
``gpusafe run --device cpu``: each passes its own result check with its
kernels checked, and a copy mutated to overflow a buffer of that memory
kind is reported at the kernel line of the mutation, naming the allocation's
line in the program.  Subprocesses: slow.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_run_cli import gpusafe_run, line_of

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).parent / "programs"
FAMILIES = ["device_attributes", "zero_copy", "managed_memory", "stream_ordered",
            "vector_add_mmap", "global_to_shmem_async_copy", "vector_add_drv"]


def install(tmp_path: Path, name: str, replace: list[tuple[str, str]] = ()) -> Path:
    """The program and its helper in ``tmp_path``, with ``replace`` applied (each must apply)."""
    shutil.copy(PROGRAMS / "cuda_helpers.py", tmp_path / "cuda_helpers.py")
    text = (PROGRAMS / f"{name}.py").read_text()
    for old, new in replace:
        assert old in text, (name, old)
        text = text.replace(old, new)
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", FAMILIES)
def test_the_program_passes_with_its_kernels_checked(tmp_path: Path, name: str) -> None:
    app = install(tmp_path, name)
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 0, out
    assert "PASSED" in out and "waived" not in out, out
    assert doc["violations"] == []
    assert doc["summary"]["kernels_checked"] >= 1 and doc["summary"]["launches"] >= 1


@dataclass(frozen=True)
class Mutation:
    program: str
    old: str  # the kernel line as written
    new: str  # the same line overflowing a buffer
    access: str
    allocated: str  # text of the program line that allocates the overflowed buffer
    entries: int = 1  # the kernel runs once per allocation overflowed
    instruction: str = ""  # what the reported PTX instruction starts with, when it matters


MUTATIONS = [
    Mutation("device_attributes", "data[i] = data[i] * factor;", "data[i + 1] = data[i] * factor;",
             "write", "d_data = checkCudaErrors(runtime.cudaMalloc"),
    Mutation("zero_copy", "c[idx] = a[idx] + b[idx];", "c[idx] = a[idx] + b[idx + 1];",
             "read", "checkCudaErrors(runtime.cudaHostRegister("),
    Mutation("zero_copy", "c[idx] = a[idx] + b[idx];", "c[idx + 1] = a[idx] + b[idx];",
             "write", "c_ptr = checkCudaErrors(runtime.cudaHostAlloc("),
    Mutation("managed_memory", "y[i] = a * x[i] + y[i];", "y[i] = a * x[i + 1] + y[i];",
             "read", "x_ptr = checkCudaErrors(runtime.cudaMallocManaged("),
    Mutation("stream_ordered", "c[idx] = a[idx] + b[idx];", "c[idx] = a[idx] + b[idx + 1];",
             "read", "d_a, d_b, d_c = alloc(a.nbytes)", entries=2),  # default and own pool
    Mutation("vector_add_mmap", "C[i] = A[i] + B[i];", "C[i] = A[i - 1] + B[i];",
             "read", "checkCudaErrors(driver.cuMemMap(dptr, size, 0, handle, 0))"),
    # the source of an asynchronous global -> shared copy, one element past B
    Mutation("global_to_shmem_async_copy",
             "MEMCPY_ASYNC(&Bs[stage ^ 1][ty][tx], &B[b + bStep + wB * ty + tx]);",
             "MEMCPY_ASYNC(&Bs[stage ^ 1][ty][tx], &B[b + bStep + wB * ty + tx + 1]);",
             "read", "d_B = checkCudaErrors(runtime.cudaMalloc(mem_size_B))",
             instruction="cp.async.ca.shared.global"),
    # launched with a float grid size
    Mutation("vector_add_drv", "C[i] = A[i] + B[i];", "C[i] = A[i] + B[i + 1];",
             "read", "d_B = checkCudaErrors(driver.cuMemAlloc(size))"),
]


def kernel_line(app: Path, needle: str) -> int:
    """The line of ``needle`` within the kernel source string that holds it."""
    lines = app.read_text().split("\n")
    at = line_of(app, needle)
    start = max(i for i in range(1, at) if lines[i - 1].rstrip().endswith('"""\\'))
    return at - start


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: f"{m.program}-{m.access}")
def test_an_overflow_of_the_memory_kind_is_reported_at_its_line(tmp_path: Path,
                                                                m: Mutation) -> None:
    app = install(tmp_path, m.program, [(m.old, m.new)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    found = [v for v in doc["violations"] if v["kind"] == "global-out-of-bounds"]
    assert [v["access"] for v in found] == [m.access] * m.entries, out
    v = found[0]
    assert v["instruction"].startswith(m.instruction), v["instruction"]
    location = v["location"]
    if location["file"].endswith(".cu"):  # the kernel source, as NVRTC named it
        assert location["line"] == kernel_line(app, m.new)
    else:  # the program line holding the kernel's line
        assert location["file"].endswith(app.name) and location["line"] == line_of(app, m.new)
    if m.program == "stream_ordered":  # allocated through the program's own helper
        assert v["allocation"]["allocated_at"].startswith(f"{app.name}:")
    else:
        assert v["allocation"]["allocated_at"] == f"{app.name}:{line_of(app, m.allocated)}"


def test_a_pool_block_used_after_its_stream_ordered_free_is_a_use_after_free(
        tmp_path: Path) -> None:
    early_free = "    checkCudaErrors(runtime.cudaFreeAsync(d_a, stream))\n    block = 256\n"
    app = install(tmp_path, "stream_ordered", [
        ("    block = 256\n", early_free),
        ("for p in (d_a, d_b, d_c):", "for p in (d_b, d_c):"),
    ])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    uaf = [v for v in doc["violations"] if v["kind"] == "use-after-free"]
    assert uaf, out
    freed = f"{app.name}:{line_of(app, 'checkCudaErrors(runtime.cudaFreeAsync(d_a, stream))')}"
    assert all(v["allocation"]["freed_at"] == freed for v in uaf)
    # one bug, one entry: the kernel's read through the freed pointer it was passed
    assert {v["access"] for v in uaf} == {"read"}
    assert {v.get("argument") for v in uaf} == {0}


def test_managed_memory_never_freed_is_a_leak(tmp_path: Path) -> None:
    app = install(tmp_path, "managed_memory",
                  [("    checkCudaErrors(runtime.cudaFree(y_ptr))\n", "")])
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 86, out
    leaks = [v for v in doc["violations"] if v["kind"] == "leak"]
    where = f"{app.name}:{line_of(app, 'y_ptr = checkCudaErrors(runtime.cudaMallocManaged(')}"
    assert [v["allocation"]["allocated_at"] for v in leaks] == [where]
    assert leaks[0]["allocation"]["size"] == 3000 * 4


def test_vmm_mappings_never_unmapped_are_leaks_and_used_after_unmap_are_caught(
        tmp_path: Path) -> None:
    app = install(tmp_path, "vector_add_mmap", [
        ("    for dptr, size in ((d_A, size_A), (d_B, size_B), (d_C, size_C)):\n"
         "        simpleFreeMmap(dptr, size)\n",
         "    simpleFreeMmap(d_A, size_A)\n"
         "    checkCudaErrors(driver.cuLaunchKernel(\n"
         "        kernel, grid, 1, 1, block, 1, 1, 0, 0,\n"
         "        ((d_A, d_B, d_C, n), (None, None, None, ctypes.c_int)), 0))\n"),
    ])
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", app.name)
    assert rc == 86, out
    mapped_at = f"{app.name}:{line_of(app, 'checkCudaErrors(driver.cuMemMap(')}"
    leaks = [v for v in doc["violations"] if v["kind"] == "leak"]
    assert [v["allocation"]["allocated_at"] for v in leaks] == [mapped_at] * 2
    unmapped_at = f"{app.name}:{line_of(app, 'checkCudaErrors(driver.cuMemUnmap(')}"
    uaf = [v for v in doc["violations"] if v["kind"] == "use-after-free"]
    assert uaf and all(v["allocation"]["freed_at"] == unmapped_at for v in uaf)
    assert "read" in {v["access"] for v in uaf}


def test_mapped_memory_used_after_it_is_freed_or_unregistered_is_a_use_after_free(
        tmp_path: Path) -> None:
    relaunch = ("    launch(kernel, grid, block, (d_a, d_b, d_c, nelem),\n"
                "           (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int))\n"
                "    if errors:\n")
    app = install(tmp_path, "zero_copy", [("    if errors:\n", relaunch)])
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert rc == 86, out
    uaf = [v for v in doc["violations"] if v["kind"] == "use-after-free"]
    freed = {v["allocation"]["freed_at"] for v in uaf}
    assert freed == {f"{app.name}:{line_of(app, needle)}" for needle in (
        "runtime.cudaHostUnregister(b.ctypes.data)", "runtime.cudaFreeHost(a_ptr)",
        "runtime.cudaFreeHost(c_ptr)")}, out
    # each freed pointer passed to the launch, with the kernel's accesses through it:
    # every one of the 4096 threads counted at its site (the tallies drop none)
    assert sorted((v["access"], v["count"]) for v in uaf) == [
        ("read", 4096), ("read", 4096), ("write", 4096)], out
    assert out.count("a pointer into memory freed before the launch") == 3

"""``gpusafe run --device cpu`` on a cuda-python program whose kernels use the
device heap (in-kernel ``malloc``/``free``): correct use reports nothing,
across launches too; each misuse is one entry of its own kind, described as
a device-heap allocation with the kernel and line of its malloc.

Before the heap joined the checks, the correct program below got 8 false
out-of-bounds entries (1024 occurrences) and the buggy one had its use
after free called out-of-bounds."""

from __future__ import annotations

import pytest
from test_run_cli import gpusafe_run
from test_run_hardening import _program

pytestmark = pytest.mark.slow

KERNELS = r"""
extern "C" __global__ void heap_make(char** slots, int n, int over)
{
    int t = threadIdx.x;
    char* p = (char*)malloc(n);
    for (int i = 0; i < n; ++i) p[i] = (char)(t + i);
    if (over && t == 0) p[n] = 1;
    slots[t] = p;
}
extern "C" __global__ void heap_use(char** slots, int* out, int n)
{
    int t = threadIdx.x;
    char* p = slots[t];
    int s = 0;
    for (int i = 0; i < n; ++i) s += p[i];
    out[t] = s;
}
extern "C" __global__ void heap_free(char** slots, int twice)
{
    char* p = slots[threadIdx.x];
    free(p);
    if (twice && threadIdx.x == 0) free(p);
}
extern "C" __global__ void heap_stale(char** slots, int* out)
{
    out[threadIdx.x] = slots[threadIdx.x][0];
}
extern "C" __global__ void heap_bad_free(char** slots)
{
    free(slots[threadIdx.x] + 1);
}
"""

BODY = f"""\
ptx = compile_to_ptx({KERNELS!r}, "heap.cu")
mod = check(driver.cuModuleLoadData(ptx.encode()))
T, N = 32, 16
slots = check(driver.cuMemAlloc(8 * T))
out = check(driver.cuMemAlloc(4 * T))

def launch(name, *args):
    fn = check(driver.cuModuleGetFunction(mod, name.encode()))
    values = [np.array([int(a)], dtype=np.uint64) if isinstance(a, driver.CUdeviceptr)
              else np.array([a], dtype=np.int32) for a in args]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    check(driver.cuLaunchKernel(fn, 1, 1, 1, T, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())

launch("heap_make", slots, N, int(BUGS))
launch("heap_use", slots, out, N)       # blocks of an earlier launch
host = np.zeros(T, dtype=np.int32)
check(driver.cuMemcpyDtoH(host, out, host.nbytes))
assert host.tolist() == [sum(t + i for i in range(N)) for t in range(T)], host
if BUGS:
    launch("heap_free", slots, 1)       # thread 0 frees its block twice
    launch("heap_stale", slots, out)    # every thread reads its freed block
    launch("heap_make", slots, N, 0)
    launch("heap_bad_free", slots)      # free(p + 1)
else:
    launch("heap_free", slots, 0)
check(driver.cuMemFree(slots))
check(driver.cuMemFree(out))
print("program done")
"""


def test_correct_use_of_the_device_heap_reports_nothing(tmp_path) -> None:
    app = _program(tmp_path, "BUGS = False\n" + BODY)
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", str(app))
    assert "program done" in out, out
    assert rc == 0, out
    # a block a kernel never frees would not be a leak either (docs/decisions.md)
    assert doc["violations"] == [], out
    assert doc["summary"]["launches"] == 3


def test_each_misuse_of_the_device_heap_is_one_entry_of_its_kind(tmp_path) -> None:
    app = _program(tmp_path, "BUGS = True\n" + BODY)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert "program done" in out, out
    assert rc == 86, out
    by_kind = {v["kind"]: v for v in doc["violations"]}
    assert sorted((k, v["count"]) for k, v in by_kind.items()) == [
        ("double-free", 1), ("global-out-of-bounds", 1), ("invalid-free", 32),
        ("use-after-free", 32)], out

    oob = by_kind["global-out-of-bounds"]
    assert (oob["kernel"], oob["access"], oob["size"]) == ("heap_make", "write", 1)
    assert oob["location"]["line"] == 7
    alloc = oob["allocation"]
    assert (alloc["size"], alloc["offset"], alloc["allocated_by_kernel"]) == (16, 16, "heap_make")
    assert alloc["allocated_at"].endswith("heap.cu:5") and alloc["freed_at"] is None

    uaf = by_kind["use-after-free"]
    assert uaf["kernel"] == "heap_stale" and uaf["access"] == "read"
    assert uaf["allocation"]["freed_at"].endswith("heap.cu:21")

    double = by_kind["double-free"]
    assert (double["kernel"], double["access"], double["location"]["line"]) == (
        "heap_free", None, 22)
    assert double["threads"] == [{"block": [0, 0, 0], "thread": [0, 0, 0]}]

    bad = by_kind["invalid-free"]
    assert bad["kernel"] == "heap_bad_free" and bad["allocation"]["offset"] == 1

    assert ("0 bytes past the end of a 16-byte device-heap allocation" in out
            and "allocated by malloc in kernel heap_make at heap.cu:5" in out), out

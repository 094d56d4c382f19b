"""``tests/programs/simple_p2p.py`` (written as cuda-python's simpleP2P is)
under ``gpusafe run --device cpu --cpu-devices 2``: it passes its own check
with both kernels checked; a copy mutated to overflow a buffer is reported
at the kernel's .cu line; an overflowing peer copy is refused and reported
as the other copies are; a kernel reaching the other device's memory
without peer access faults as on a GPU; and with the default single device
the program waives itself and gpusafe says no launch was checked.
Subprocesses: slow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_memory_kind_programs import install, kernel_line
from test_run_cli import gpusafe_run, line_of

pytestmark = pytest.mark.slow

NAME = "simple_p2p"


def test_simple_p2p_passes_on_two_cpu_devices_with_its_kernels_checked(tmp_path: Path) -> None:
    app = install(tmp_path, NAME)
    rc, doc, out = gpusafe_run(tmp_path, "--cpu-devices", "2", "--leak-check", "python", app.name)
    assert rc == 0, out
    assert "simpleP2P: PASSED" in out and "waiving" not in out, out
    assert "CUDA-capable device count: 2" in out
    assert doc["violations"] == [] and not doc.get("unimplemented_calls")
    assert doc["summary"]["unimplemented_calls"] == 0
    # one kernel, loaded and launched on each device
    assert doc["summary"]["kernels_checked"] == 1 and doc["summary"]["launches"] == 2
    assert doc["summary"]["unchecked_launches"] == 0


def test_the_device_count_can_come_from_the_environment(tmp_path: Path) -> None:
    app = install(tmp_path, NAME)
    os.environ["GPUSAFE_CPU_DEVICES"] = "2"
    try:
        rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    finally:
        del os.environ["GPUSAFE_CPU_DEVICES"]
    assert rc == 0 and "simpleP2P: PASSED" in out, out
    assert doc["summary"]["launches"] == 2


def test_on_one_device_the_program_waives_itself_and_no_launch_is_checked(
        tmp_path: Path) -> None:
    app = install(tmp_path, NAME)
    rc, doc, out = gpusafe_run(tmp_path, "python", app.name)
    assert "CUDA-capable device count: 1" in out and "waiving test" in out, out
    assert rc == 0, out  # the program's own status: it ran, and checked nothing
    assert doc["summary"]["launches"] == 0 and doc["summary"]["kernels_checked"] == 0
    assert "no kernel launch was checked (0 checked launches)" in out
    assert "this is no clean pass" in out


@pytest.mark.parametrize("value", ["0", "17", "two"])
def test_a_bad_device_count_stops_the_run(tmp_path: Path, value: str) -> None:
    app = install(tmp_path, NAME)
    rc, _doc, out = gpusafe_run(tmp_path, "--cpu-devices", value, "python", app.name)
    assert rc == 2 and "--cpu-devices" in out, out
    assert "Checking for multiple GPUs" not in out


def test_an_overflow_in_the_peer_kernel_is_reported_at_its_line(tmp_path: Path) -> None:
    old, new = "dst[idx] = src[idx] * 2.0f;", "dst[idx] = src[idx + 1] * 2.0f;"
    app = install(tmp_path, NAME, [(old, new)])
    rc, doc, out = gpusafe_run(tmp_path, "--cpu-devices", "2", "python", app.name)
    assert rc == 86, out
    found = [v for v in doc["violations"] if v["kind"] == "global-out-of-bounds"]
    # the kernel on device 1 overflows device 0's buffer, the one on device 0 device 1's
    assert sorted(v["allocation"]["allocated_at"] for v in found) == [
        f"{app.name}:{line_of(app, needle)}" for needle in (
            "g0 = checkCudaErrors(runtime.cudaMalloc(buf_size))",
            "g1 = checkCudaErrors(runtime.cudaMalloc(buf_size))")], out
    for v in found:
        assert v["access"] == "read"
        assert v["location"]["file"].endswith("simpleP2P.cu")
        assert v["location"]["line"] == kernel_line(app, new)


def test_an_overflowing_peer_copy_is_refused_and_reported_at_its_call(tmp_path: Path) -> None:
    old = "runtime.cudaMemcpyPeer(g1, gpuid[1], g0, gpuid[0], buf_size)"
    new = "runtime.cudaMemcpyPeer(g1, gpuid[1], g0, gpuid[0], buf_size + 4)"
    app = install(tmp_path, NAME, [(old, new)])
    rc, doc, out = gpusafe_run(tmp_path, "--cpu-devices", "2", "python", app.name)
    assert rc == 86, out
    assert "cudaErrorInvalidValue" in out  # refused: the program's checkCudaErrors stops it
    found = [v for v in doc["violations"] if v["kind"] == "api-out-of-bounds"]
    assert len(found) == 1, out
    assert found[0]["location"]["line"] == line_of(app, new)


def test_a_kernel_reaching_the_other_device_without_peer_access_faults(tmp_path: Path) -> None:
    enable = "    checkCudaErrors(runtime.cudaDeviceEnablePeerAccess(gpuid[0], 0))\n"
    disable = "    checkCudaErrors(runtime.cudaDeviceDisablePeerAccess(gpuid[0]))\n"
    app = install(tmp_path, NAME, [(enable, ""), (disable, "")])
    rc, doc, out = gpusafe_run(tmp_path, "--cpu-devices", "2", "python", app.name)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in out  # what a GPU answers: the program stops
    assert rc == 1, out
    [fault] = doc["faults"]
    assert fault["error"] == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert "memory of device 0, which the launching device has no peer access to" \
        in fault["detail"]
    assert "simpleP2P.cu:" in fault["detail"]


def test_pytest_gpusafe_gives_the_tests_the_devices_asked_for(tmp_path: Path) -> None:
    (tmp_path / "test_count.py").write_text(
        "from cuda.bindings import runtime\n\n\n"
        "def test_two_devices():\n"
        "    assert runtime.cudaGetDeviceCount() == (runtime.cudaError_t.cudaSuccess, 2)\n")
    env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1]),
                                         *filter(None, [env.get("PYTHONPATH")])])
    env.pop("GPUSAFE_SESSION", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "gpusafe.pytest_plugin",
                        "-p", "no:cacheprovider", "--gpusafe", "--gpusafe-device", "cpu",
                        "--gpusafe-cpu-devices", "2", "test_count.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout

"""``gpusafe run`` where programs do hard things: a kernel that faults after a
bad access, launches from several threads, forked children."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from test_run_cli import PROLOGUE, ROOT, gpusafe_run

FAULTING = r"""
extern "C" __device__ void __assertfail(const char*, const char*, unsigned, const char*, size_t);
#define assert(e) ((e) ? (void)0 : __assertfail(#e, __FILE__, __LINE__, __func__, 1))
extern "C" __global__ void write_then_assert(int* out, int n)
{
    int i = threadIdx.x;
    out[i] = i;            // out has n elements: threads n.. write past its end
    assert(i < n + 100);   // fails for thread n + 100 and up
}
"""


def _program(tmp_path: Path, body: str) -> Path:
    text = PROLOGUE.format(samples=str(ROOT / "samples"),
                           import_line="from cuda.bindings import driver")
    path = tmp_path / "app.py"
    path.write_text(text + textwrap.dedent(body))
    return path


def test_a_launch_that_faults_keeps_the_violations_found_before_the_fault(tmp_path) -> None:
    app = _program(tmp_path, f"""\
    ptx = compile_to_ptx({FAULTING!r}, "fault.cu")
    mod = check(driver.cuModuleLoadData(ptx.encode()))
    fn = check(driver.cuModuleGetFunction(mod, b"write_then_assert"))
    out = check(driver.cuMemAlloc(4 * 16))
    values = [np.array([int(out)], dtype=np.uint64), np.array([16], dtype=np.int32)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    err, = driver.cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, 0, params.ctypes.data, 0)
    print("launch:", err.name)
    sys.exit(0 if err == driver.CUresult.CUDA_ERROR_ASSERT else 3)
    """)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert "launch: CUDA_ERROR_ASSERT" in out, out
    assert rc == 86, out
    assert [v["kind"] for v in doc["violations"]] == ["global-out-of-bounds"]
    assert doc["faults"][0]["kernel"] == "write_then_assert"
    assert doc["faults"][0]["error"] == "CUDA_ERROR_ASSERT"
    assert not doc["faults"][0]["detail"].startswith("CUDA_ERROR_ASSERT")  # said once
    # the source line of the failed assert, not only a line of the instrumented PTX
    assert doc["faults"][0]["detail"].endswith("fault.cu:8)"), doc["faults"]
    assert doc["faults"][0]["detail"].startswith("kernel write_then_assert: fault.cu:8: ")
    assert "device fault: kernel write_then_assert did not finish" in out


def test_launches_from_several_threads_are_checked_and_counted_once(tmp_path) -> None:
    kernel = r"""
    extern "C" __global__ void fill(int* out, int n)
    {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i <= n) out[i] = i;   // one element past the end
    }
    """
    app = _program(tmp_path, f"""\
    import threading
    ptx = compile_to_ptx({kernel!r}, "fill.cu")
    mod = check(driver.cuModuleLoadData(ptx.encode()))
    fn = check(driver.cuModuleGetFunction(mod, b"fill"))
    failures = []

    def worker(k):
        try:
            check(driver.cuCtxSetCurrent(ctx))
            n = 64
            out = check(driver.cuMemAlloc(4 * n))
            values = [np.array([int(out)], dtype=np.uint64), np.array([n], dtype=np.int32)]
            params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
            for _ in range(5):
                check(driver.cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, 0,
                                            params.ctypes.data, 0))
            check(driver.cuCtxSynchronize())
            check(driver.cuMemFree(out))
        except Exception as e:  # noqa: BLE001
            failures.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    """)
    rc, doc, out = gpusafe_run(tmp_path, "python", str(app))
    assert rc == 86, out
    assert doc["summary"]["launches"] == 20
    # one write past the end per launch: 20 occurrences, whichever thread drained them
    assert doc["summary"]["occurrences"] == 20, out
    assert {v["kind"] for v in doc["violations"]} == {"global-out-of-bounds"}


def test_a_forked_child_does_not_report_its_parents_findings(tmp_path) -> None:
    app = _program(tmp_path, """\
    import os
    p = check(driver.cuMemAlloc(64))
    q = check(driver.cuMemAlloc(64))
    driver.cuMemFree(int(p) + 1)      # the parent's one invalid free
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            sys.exit(0)               # a child that exits normally: atexit runs
        os.waitpid(pid, 0)
    check(driver.cuMemFree(q))
    """)
    rc, doc, out = gpusafe_run(tmp_path, "--leak-check", "python", str(app))
    assert rc == 86, out
    kinds = sorted((v["kind"], v["count"]) for v in doc["violations"])
    assert kinds == [("invalid-free", 1), ("leak", 1)], out  # p leaks, once, in the parent


def _start_gpusafe(tmp_path: Path, app: Path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen(
        [sys.executable, "-m", "gpusafe", "run", "--device", "cpu", "--", sys.executable,
         str(app)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)


WAITING = """\
import os, signal, sys, time
def stop(signum, frame):
    open("interrupted", "w").write(str(signum))
    sys.exit(5)
signal.signal(signal.SIGINT, stop)
open("pid.tmp", "w").write(str(os.getpid()))
os.replace("pid.tmp", "pid")
while True:
    time.sleep(0.05)
"""


def _wait_for(path: Path, seconds: float = 60) -> str:
    import time

    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:") and "Z" in line for line in f)
    except FileNotFoundError:
        return True


def test_sigint_sent_to_gpusafe_alone_reaches_the_program(tmp_path) -> None:
    import os
    import signal

    app = tmp_path / "wait.py"
    app.write_text(WAITING)
    proc = _start_gpusafe(tmp_path, app)
    _wait_for(tmp_path / "pid")
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert (tmp_path / "interrupted").read_text() == str(int(signal.SIGINT)), out
    assert proc.returncode == 5, out  # the program's own status: nothing was found


def test_the_program_dies_with_gpusafe(tmp_path) -> None:
    import os
    import signal
    import time

    app = tmp_path / "wait.py"
    app.write_text(WAITING)
    proc = _start_gpusafe(tmp_path, app)
    pid = int(_wait_for(tmp_path / "pid"))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 30
    while not _gone(pid):
        assert time.monotonic() < deadline, "the program outlived gpusafe"
        time.sleep(0.05)


def test_a_kernel_that_never_ends_is_stopped_and_named(tmp_path) -> None:
    spin = r"""
    extern "C" __global__ void spin(volatile int* flag)
    {
        while (*flag) { }
    }
    """
    app = _program(tmp_path, f"""\
    ptx = compile_to_ptx({spin!r}, "spin.cu")
    mod = check(driver.cuModuleLoadData(ptx.encode()))
    fn = check(driver.cuModuleGetFunction(mod, b"spin"))
    flag = check(driver.cuMemAlloc(4))
    check(driver.cuMemsetD32(flag, 1, 1))
    values = [np.array([int(flag)], dtype=np.uint64)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    err, = driver.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0)
    print("launch:", err.name)
    """)
    rc, doc, out = gpusafe_run(tmp_path, "--kernel-timeout", "1", "python", str(app))
    assert "launch: CUDA_ERROR_LAUNCH_TIMEOUT" in out, out
    assert rc == 2, out
    assert doc["faults"][0]["kernel"] == "spin"
    assert "kernel spin never finished" in out


def test_the_program_imports_its_own_modules_and_sees_only_the_start_up_hook(tmp_path) -> None:
    import json
    import os
    import subprocess
    import sys


    (tmp_path / "instrument.py").write_text("WHO = 'the program'\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("WHO = 'the program'\n")
    app = _program(tmp_path, """\
    import json, os
    import instrument, tests
    ptx = compile_to_ptx('extern "C" __global__ void k(int* p) { p[threadIdx.x + 1] = 0; }',
                         "k.cu")
    fn = check(driver.cuModuleGetFunction(check(driver.cuModuleLoadData(ptx.encode())), b"k"))
    out = check(driver.cuMemAlloc(4))
    arg = np.array([int(out)], dtype=np.uint64)
    params = np.array([arg.ctypes.data], dtype=np.uint64)
    check(driver.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, params.ctypes.data, 0))
    check(driver.cuCtxSynchronize())
    own = {name: getattr(sys.modules[name], "__file__", None)
           for name in sys.modules if name.split(".")[0] in ("gpusafe", "gpusafe_instrument")}
    json.dump({"who": [instrument.WHO, tests.WHO], "path": sys.path, "own": own,
               "gpusafe": "gpusafe" in sys.modules}, open(os.environ["OUT"], "w"))
    """)
    # gpusafe as installed (no PYTHONPATH of ours), and the program run plainly
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    (tmp_path / "paths.py").write_text(
        "import json, os, sys\njson.dump({'path': sys.path, 'gpusafe': 'gpusafe' in sys.modules},"
        " open(os.environ['OUT'], 'w'))\n")
    plain = subprocess.run([sys.executable, str(tmp_path / "paths.py")], cwd=tmp_path,
                           capture_output=True, text=True,
                           env=dict(env, OUT=str(tmp_path / "plain.json")))
    assert plain.returncode == 0, plain.stderr
    checked = subprocess.run([sys.executable, "-m", "gpusafe", "run", "--device", "cpu",
                              sys.executable, str(app)], cwd=tmp_path, capture_output=True,
                             text=True, env=dict(env, OUT=str(tmp_path / "checked.json")))
    assert checked.returncode == 86, checked.stdout + checked.stderr  # the kernel was checked
    # the gpusafe that ran is the installed one (no PYTHONPATH): its start-up folder
    boot, home = subprocess.run(
        [sys.executable, "-c", "from gpusafe.process.start import BOOT_DIR, PACKAGES_HOME; "
         "print(BOOT_DIR); print(PACKAGES_HOME)"], cwd=tmp_path, env=env, capture_output=True,
        text=True, check=True).stdout.split()
    before = json.loads((tmp_path / "plain.json").read_text())
    after = json.loads((tmp_path / "checked.json").read_text())
    assert after["who"] == ["the program", "the program"]
    samples = str(ROOT / "samples")  # the program's own sys.path.insert
    assert [p for p in after["path"] if p not in (boot, samples)] == before["path"]
    assert set(os.listdir(boot)) <= {"sitecustomize.py", "__pycache__"}
    assert after["gpusafe"] and not before["gpusafe"]
    assert all(Path(f).is_relative_to(home)
               for f in after["own"].values() if f), after["own"]


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_program_killed_by_sigterm_keeps_its_launch_counts(tmp_path, sigint: str) -> None:
    """Killed while it waits (a CI job's timeout), the program has run three
    checked launches within the same second: the report counts all three,
    which only a flush at the signal (atexit does not run) can write.  Also
    when it started with SIGINT ignored, as a script's background job does
    (Python then installs no SIGINT handler of its own)."""
    import os
    import signal
    import subprocess

    def start() -> None:
        if sigint == "ignored":
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    app = _program(tmp_path, """\
    ptx = compile_to_ptx('extern "C" __global__ void one(int* p) { p[threadIdx.x] = 1; }',
                         "one.cu")
    fn = check(driver.cuModuleGetFunction(check(driver.cuModuleLoadData(ptx.encode())), b"one"))
    out = check(driver.cuMemAlloc(4 * 32))
    values = [np.array([int(out)], dtype=np.uint64)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    for _ in range(3):
        check(driver.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0))
    import os, time
    open("pid.tmp", "w").write(str(os.getpid()))
    os.replace("pid.tmp", "pid")
    while True:
        time.sleep(0.05)
    """)
    report = tmp_path / "report.json"
    env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpusafe", "run", "--device", "cpu", "--json", str(report), "--",
         sys.executable, str(app)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, preexec_fn=start)
    _wait_for(tmp_path / "pid", seconds=120)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out
    doc = json.loads(report.read_text())
    assert doc["summary"]["launches"] == 3, out


def test_a_kernel_the_jit_leaves_to_the_interpreter_is_named_in_the_report(tmp_path) -> None:
    """GPUSAFE_CPU_ENGINE=jit: a kernel outside the JIT's reach still runs
    checked, on the interpreter, and the report's notes say so and why."""
    import os
    import subprocess

    app = _program(tmp_path, """\
    src = '''
    extern "C" __global__ void twice(int* p) {
        __shared__ int s[32];
        s[threadIdx.x] = p[threadIdx.x];
        __syncwarp();
        int v = ((volatile int*)s)[threadIdx.x];  // ld.volatile.shared: outside the JIT's reach
        p[threadIdx.x] = 2 * (v + threadIdx.x);
    }
    '''
    ptx = compile_to_ptx(src, "twice.cu")
    fn = check(driver.cuModuleGetFunction(check(driver.cuModuleLoadData(ptx.encode())), b"twice"))
    out = check(driver.cuMemAlloc(4 * 32))
    check(driver.cuMemsetD32(out, 0, 32))
    values = [np.array([int(out)], dtype=np.uint64)]
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    check(driver.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params.ctypes.data, 0))
    host = np.zeros(32, dtype=np.int32)
    check(driver.cuMemcpyDtoH(host.ctypes.data, out, 4 * 32))
    assert list(host) == [2 * i for i in range(32)]
    """)
    report = tmp_path / "report.json"
    env = dict(os.environ, NO_COLOR="1", XDG_CACHE_HOME=str(tmp_path / "cache"),
               GPUSAFE_CPU_ENGINE="jit")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-m", "gpusafe", "run", "--device", "cpu", "--json", str(report), "--",
         sys.executable, str(app)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    doc = json.loads(report.read_text())
    assert doc["summary"]["launches"] == 1
    assert [n.split(":")[0] for n in doc["notes"]] == [
        "kernel twice ran on the CPU device's interpreter, not its JIT"], doc["notes"]
    assert "note: kernel twice ran on the CPU device's interpreter, not its JIT: " in out

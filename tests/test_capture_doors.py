"""The doors' launch wrappers and stream capture: a launch on a capturing
stream is a graph node, so the door must not run it as a checked launch now;
on a backend that cannot route graph kernels through the door (a GPU today)
it is refused and named, never captured unchecked."""

from __future__ import annotations

from cuda.bindings import driver as cuda_driver
from test_engine import OK, StandInDriver, make_engine

from gpusafe.doors.python_driver import DriverDoor
from gpusafe.doors.wrappers import GRAPHS_UNROUTED

R = cuda_driver.CUresult
ACTIVE = cuda_driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
NONE = cuda_driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


class CapturingDriver(StandInDriver):
    """A GPU-like backend (no ``set_graph_calls``) whose stream 7 captures."""

    def cuStreamIsCapturing(self, stream):
        return (OK, ACTIVE if int(stream) == 7 else NONE)


def _door(driver: StandInDriver):
    engine, _ = make_engine()
    engine.driver = driver
    return engine, DriverDoor(engine, {n: getattr(driver, n) for n in (
        "cuLaunchKernel", "cuLaunchKernelEx", "cuGraphAddKernelNode")}).wrappers()


def _launched(driver: StandInDriver) -> list[str]:
    return [c[0] for c in driver.calls if c[0].startswith("cuLaunchKernel")]


def test_a_captured_launch_on_an_unrouted_backend_is_refused_and_named() -> None:
    driver = CapturingDriver()
    engine, wrappers = _door(driver)
    launch = wrappers["cuLaunchKernel"]
    assert launch(0x10, 1, 1, 1, 32, 1, 1, 0, 7, None, 0) == (R.CUDA_ERROR_NOT_SUPPORTED,)
    assert _launched(driver) == []
    calls = engine.findings.report.build(exit_code=0).to_dict()["unimplemented_calls"]
    assert [(c["name"], c["reason"]) for c in calls] == [("cuLaunchKernel", GRAPHS_UNROUTED)]
    config = cuda_driver.CUlaunchConfig()
    config.hStream = 7
    assert wrappers["cuLaunchKernelEx"](config, 0x10, None, 0) == (R.CUDA_ERROR_NOT_SUPPORTED,)
    assert _launched(driver) == []


def test_a_launch_on_a_stream_that_does_not_capture_runs_now() -> None:
    driver = CapturingDriver()
    engine, wrappers = _door(driver)
    wrappers["cuLaunchKernel"](0x10, 1, 1, 1, 32, 1, 1, 0, 3, None, 0)
    assert _launched(driver) == ["cuLaunchKernel"]  # unknown kernel: run, counted unchecked
    report = engine.findings.report.build(exit_code=0).to_dict()
    assert report["summary"]["unchecked_launches"] == 1
    assert report["summary"]["unimplemented_calls"] == 0


def test_a_stream_ordered_free_in_a_capture_is_left_to_the_backend() -> None:
    """It would be a graph node freeing at each launch: freeing it now (into
    the quarantine) would make the graph's own kernels use-after-free."""
    driver = CapturingDriver()
    engine, _ = make_engine()
    engine.driver = driver
    wrappers = DriverDoor(engine, {n: getattr(driver, n) for n in (
        "cuMemAlloc", "cuMemFreeAsync")}).wrappers()
    _, p, _ = wrappers["cuMemAlloc"](64)
    wrappers["cuMemFreeAsync"](p, 7)
    assert driver.calls[-1] == ("cuMemFreeAsync", p, 7)
    assert engine.address_range(int(p)) == (int(p), 64)  # still live to gpusafe
    wrappers["cuMemFreeAsync"](p, 3)
    assert engine.address_range(int(p)) is None

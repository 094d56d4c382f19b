"""The allocation registry's verdicts: tags, quarantine, bad frees, bad ranges, leaks."""

from __future__ import annotations

from gpusafe.engine.callsite import program_site
from gpusafe.engine.registry import Registry, State
from gpusafe_instrument.kinds import ViolationKind

BASE = 0x7F00_0000_0000


def registry_with(*sizes: int, **kw) -> tuple[Registry, list]:
    reg = Registry(**kw)
    allocs = []
    addr = BASE
    for size in sizes:
        allocs.append(reg.allocated(addr, size, "cuMemAlloc", "app.py:1"))
        addr += (reg.reserve_size(size) + 255) // 256 * 256
    return reg, allocs


def test_tags_are_never_reused() -> None:
    reg, (a, b) = registry_with(64, 64, quarantine=0)
    released = reg.free(a.base, "cuMemFree", "app.py:2").release
    assert released == [a.base]
    c = reg.allocated(a.base, 64, "cuMemAlloc", "app.py:3")
    assert (a.tag, b.tag, c.tag) == (1, 2, 3)
    assert reg.find(a.base) is c


def test_find_locates_the_containing_allocation_and_not_its_red_zone() -> None:
    reg, (a, b) = registry_with(100, 8)
    assert reg.find(a.base + 99) is a
    assert reg.find(a.base + 100) is None  # red zone
    assert reg.nearest(a.base + 100) is a
    assert reg.find(b.base) is b
    assert reg.find(BASE - 1) is None


def test_freed_memory_stays_in_quarantine_and_is_found_as_freed() -> None:
    reg, (a,) = registry_with(64)
    result = reg.free(a.base, "cuMemFree", "app.py:9")
    assert result.violation is None and result.release == []
    assert reg.find(a.base + 4) is a and a.state is State.FREED and a.freed_at == "app.py:9"


def test_quarantine_releases_oldest_first_when_full() -> None:
    reg, (a, b, c) = registry_with(1000, 1000, 1000, padding=0, quarantine=2000)
    assert reg.free(a.base, "cuMemFree", None).release == []
    assert reg.free(b.base, "cuMemFree", None).release == []
    assert reg.free(c.base, "cuMemFree", None).release == [a.base]
    assert reg.find(a.base) is None and reg.find(b.base) is b


def test_double_free() -> None:
    reg, (a,) = registry_with(64)
    reg.free(a.base, "cuMemFree", "app.py:5")
    v = reg.free(a.base, "cuMemFree", "app.py:6").violation
    assert v.kind is ViolationKind.DOUBLE_FREE and v.allocation is a and v.location == "app.py:6"


def test_free_of_an_interior_pointer_is_invalid() -> None:
    reg, (a,) = registry_with(64)
    v = reg.free(a.base + 8, "cuMemFree", None).violation
    assert v.kind is ViolationKind.INVALID_FREE and v.allocation is a
    assert a.state is State.LIVE


def test_free_of_an_unknown_pointer_is_invalid() -> None:
    reg, _ = registry_with(64)
    v = reg.free(0x1234, "cuMemFree", None).violation
    assert v.kind is ViolationKind.INVALID_FREE and v.allocation is None


def test_copy_ranges() -> None:
    reg, (a,) = registry_with(256)
    assert reg.check_range(a.base, 256, "cuMemcpyHtoD", None) is None
    past = reg.check_range(a.base + 128, 256, "cuMemcpyHtoD", None)
    assert past.kind is ViolationKind.API_OUT_OF_BOUNDS and past.allocation is a
    outside = reg.check_range(a.base + 300, 4, "cuMemcpyHtoD", None)
    assert outside.kind is ViolationKind.API_OUT_OF_BOUNDS and outside.allocation is a
    reg.free(a.base, "cuMemFree", None)
    stale = reg.check_range(a.base, 4, "cuMemcpyDtoH", None)
    assert stale.kind is ViolationKind.USE_AFTER_FREE


def test_freed_kernel_argument() -> None:
    reg, (a, b) = registry_with(64, 64)
    reg.free(a.base, "cuMemFree", None)
    assert reg.check_argument(a.base + 4, "cuLaunchKernel", None).kind is (
        ViolationKind.USE_AFTER_FREE)
    assert reg.check_argument(b.base, "cuLaunchKernel", None) is None
    assert reg.check_argument(42, "cuLaunchKernel", None) is None  # a plain integer


def test_leaks_are_the_live_allocations_at_their_allocation_sites() -> None:
    reg, (a, b, c) = registry_with(8, 16, 32)
    reg.free(b.base, "cuMemFree", None)
    leaks = reg.leaks()
    assert [v.allocation.tag for v in leaks] == [a.tag, c.tag]
    assert all(v.kind is ViolationKind.LEAK and v.location == "app.py:1" for v in leaks)


def test_version_changes_with_every_table_change() -> None:
    reg, (a,) = registry_with(8)
    v0 = reg.version
    reg.allocated(BASE + 4096, 8, "cuMemAlloc", None)
    v1 = reg.version
    reg.free(a.base, "cuMemFree", None)
    assert v0 < v1 < reg.version


def test_program_site_is_the_callers_line() -> None:
    site = program_site()
    assert site is not None and str(site).endswith(f"test_registry.py:{_line() - 1}")


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


def test_memory_unmapped_stays_freed_until_the_driver_hands_it_out_again() -> None:
    from gpusafe.engine.registry import Registry, State
    from gpusafe_instrument.kinds import ViolationKind

    reg = Registry()
    pinned = reg.mapped(0x1000, 256, "cuMemAllocHost", "app.py:3")
    reg.unmapped([0x1000], "app.py:9")
    assert pinned.state is State.FREED and pinned.freed_at == "app.py:9"
    assert reg.check_argument(0x1010, "cuLaunchKernel", None).kind == ViolationKind.USE_AFTER_FREE
    assert reg.live() == []  # never a leak
    # the driver reuses part of the range: the old record goes
    fresh = reg.allocated(0x1080, 64, "cuMemAlloc", "app.py:12")
    assert reg.find(0x1090) is fresh and reg.find(0x1010) is None
    again = reg.mapped(0x2000, 16, "cuMemAllocHost", None)
    reg.unmapped([0x2000])
    assert reg.mapped(0x2000, 16, "cuMemAllocHost", None) is not again

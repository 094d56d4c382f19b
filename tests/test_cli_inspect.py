"""``gpusafe inspect``: the summary of a real module, as a table and as JSON,
and a clean error (no traceback, non-zero exit) for malformed PTX."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpusafe_testkit.corpus import nvrtc_compile

ROOT = Path(__file__).resolve().parent.parent

KERNEL = r"""
extern "C" __global__ void scale(float* out, const float4* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = in[i];
        out[i] = v.x + v.y + v.z + v.w;
        atomicAdd(out + n, 1.0f);
    }
}
"""


def run_gpusafe(*args: str, columns: str = "120", **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", COLUMNS=columns)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])  # this checkout
    return subprocess.run([sys.executable, "-m", "gpusafe", *args], capture_output=True,
                          text=True, env=env, **kw)


@pytest.fixture(scope="module")
def ptx_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inspect") / "scale.ptx"
    path.write_text(nvrtc_compile(KERNEL, "scale.cu", "compute_80", ["-lineinfo"]))
    return path


def test_json_summary_lists_kernel_params_and_memory_ops(ptx_file: Path) -> None:
    result = run_gpusafe("inspect", str(ptx_file), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["target"] == ["sm_80"] and summary["address_size"] == 64
    (kernel,) = summary["functions"]
    assert kernel["name"] == "scale" and kernel["kind"] == "kernel"
    assert [(p["type"], p["size"], p["align"]) for p in kernel["params"]] == [
        (".u64", 8, 8), (".u64", 8, 8), (".u32", 4, 4)]
    memory = {(m["space"], m["access"], m["width"]): m["count"] for m in kernel["memory"]}
    assert memory[("global", "read", 16)] == 1  # the float4 load: ld.global.v4.f32
    assert memory[("global", "write", 4)] == 1
    assert memory[("global", "atomic", 4)] == 1
    assert memory[("param", "read", 8)] == 2


def test_table_output_names_the_kernel_and_counts(ptx_file: Path) -> None:
    result = run_gpusafe("inspect", str(ptx_file))
    assert result.returncode == 0, result.stderr
    assert "kernel scale" in result.stdout
    assert "\x1b[" not in result.stdout  # NO_COLOR and not a TTY: plain text
    assert "16 B" in result.stdout


def test_syntax_error_exits_nonzero_with_line_and_column(tmp_path: Path, ptx_file: Path) -> None:
    lines = ptx_file.read_text().split("\n")
    target = next(i for i, line in enumerate(lines) if "ld.global" in line)
    lines[target] = lines[target].replace("]", "", 1)
    bad = tmp_path / "bad.ptx"
    bad.write_text("\n".join(lines))
    result = run_gpusafe("inspect", str(bad))
    assert result.returncode == 2
    assert f"bad.ptx:{target + 1}:" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_file_is_a_clean_error(tmp_path: Path) -> None:
    result = run_gpusafe("inspect", str(tmp_path / "nope.ptx"))
    assert result.returncode == 2 and "cannot read" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["inspect", "instrument"])
def test_an_empty_file_is_one_line_and_exit_2(tmp_path: Path, command: str) -> None:
    empty = tmp_path / "empty.ptx"
    empty.write_text("")
    args = [command, str(empty)] + (["-o", str(tmp_path / "out.ptx")]
                                    if command == "instrument" else [])
    result = run_gpusafe(*args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"gpusafe {command}: {empty}:1: no PTX here: a module starts with .version"]
    assert result.stdout == ""


def test_a_version_too_new_names_its_line(tmp_path: Path, ptx_file: Path) -> None:
    text = ptx_file.read_text()
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(".version"))
    lines[at] = ".version 99.0"
    newer = tmp_path / "newer.ptx"
    newer.write_text("\n".join(lines))
    result = run_gpusafe("inspect", str(newer))
    assert result.returncode == 2
    first = result.stderr.splitlines()[0]
    assert first == (f"gpusafe inspect: {newer}:{at + 1}:10: PTX ISA 99.0 is newer than 9.0, "
                     f"the newest gpusafe reads")
    assert "Traceback" not in result.stderr


def test_a_made_up_opcode_names_its_line_and_column(tmp_path: Path, ptx_file: Path) -> None:
    lines = ptx_file.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ld.global"))
    lines[at] = lines[at].replace("ld.global", "ldx.global", 1)
    bad = tmp_path / "made_up.ptx"
    bad.write_text("\n".join(lines))
    result = run_gpusafe("inspect", str(bad))
    assert result.returncode == 2
    column = lines[at].index("ldx") + 1
    assert result.stderr.splitlines()[0] == (
        f"gpusafe inspect: {bad}:{at + 1}:{column}: unknown instruction "
        f"'{lines[at].split()[0]}'")


STATS_KERNEL = r"""
__device__ __noinline__ void fill(int* p, int n)
{
    for (int k = 0; k < n; ++k) p[k] = k;
}

extern "C" __global__ void filled(cudaSurfaceObject_t surf, int n)
{
    int a[8];
    fill(a, n);
    surf2Dwrite(a[threadIdx.x % 8], surf, 4 * threadIdx.x, 0);
}
"""


def test_instrument_stats_show_argument_checks_and_surfaces(tmp_path: Path) -> None:
    src = tmp_path / "stats.ptx"
    src.write_text(nvrtc_compile(STATS_KERNEL, "stats.cu", "compute_75", []))
    out = tmp_path / "out.ptx"
    result = run_gpusafe("instrument", str(src), "-o", str(out), "--stats", columns="160")
    assert result.returncode == 0, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and "(" in cells[0]:
            rows[cells[0].split()[0]] = cells
    header = next(line for line in result.stdout.splitlines() if "argument" in line)
    argument = [c.strip() for c in header.split("┃")[1:-1]].index("argument")
    assert int(rows["_Z4fillPii"][argument]) >= 1  # the writes through p, by a's window
    assert "1 surface" in rows["filled"][2]
    assert "Surface accesses (suld, sust, sured) are not checked" in " ".join(
        result.stdout.split())
    assert "__gpusafe_wlo0" in out.read_text()


def test_instrument_every_offender_gives_sites_without_tallies(tmp_path: Path) -> None:
    """``--every-offender``: the PTX ``gpusafe run --every-offender`` loads,
    every site writing records (tally -1) where the default counts in tallies."""
    src = tmp_path / "scale.ptx"
    src.write_text(nvrtc_compile(KERNEL, "scale.cu", "compute_80", []))
    tallies = {}
    for flags in ((), ("--every-offender",)):
        sites = tmp_path / "sites.json"
        result = run_gpusafe("instrument", str(src), "-o", str(tmp_path / "out.ptx"),
                             "--sites", str(sites), *flags)
        assert result.returncode == 0, result.stderr
        tallies[flags] = [site["tally"] for site in json.loads(sites.read_text())["sites"]]
    assert tallies[()] and all(t >= 0 for t in tallies[()])
    assert tallies[("--every-offender",)] == [-1] * len(tallies[()])

"""Generate ``gpusafe/native/driver_api.tsv`` (and the names of the runtime's
functions, ``runtime_api.txt``): every public CUDA driver API
function, each version of it ``cuGetProcAddress`` can be asked for, the
symbol ``cuda.h`` makes a program call, and its parameters reduced to the C
scalar types the stand-in driver's stubs declare.

The stand-in ``libcuda.so.1`` is compiled on the user's machine, where
``cuda.h`` may be missing; the table is generated here, once per CUDA
release, from the headers of the pinned pip toolkit, and committed.

    python scripts/gen_driver_api.py [INCLUDE_DIR]
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
OUT = HERE / "gpusafe" / "native" / "driver_api.tsv"
RUNTIME_OUT = HERE / "gpusafe" / "native" / "runtime_api.txt"

_BUILTIN = {
    "int": "i32", "unsigned int": "u32", "unsigned": "u32", "short": "i32",
    "unsigned short": "u32", "char": "i32", "unsigned char": "u32", "long": "i64",
    "unsigned long": "u64", "long long": "i64", "unsigned long long": "u64",
    "size_t": "u64", "float": "f32", "double": "f64", "cuuint32_t": "u32",
    "cuuint64_t": "u64", "uint32_t": "u32", "uint64_t": "u64", "int32_t": "i32",
    "int64_t": "i64", "void": "void",
}


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _typedefs(text: str) -> dict[str, str]:
    """name -> a scalar code (i32, u64, ptr, ...) or ``agg`` or another name."""
    kinds: dict[str, str] = {}
    # typedef struct|union|enum TAG { ... } A, *B;
    for m in re.finditer(r"typedef\s+(struct|union|enum)\s*\w*\s*\{", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        end = text.index(";", i)
        for name in text[i:end].split(","):
            name = name.strip()
            if not name:
                continue
            if name.startswith("*"):
                kinds[name.lstrip("* ")] = "ptr"
            else:
                kinds[name] = "i32" if m.group(1) == "enum" else "agg"
    # typedef struct TAG *NAME;   typedef struct TAG NAME;
    for m in re.finditer(r"typedef\s+(struct|union|enum)\s+(\w+)\s*(\*?)\s*(\w+)\s*;", text):
        kinds[m.group(4)] = "ptr" if m.group(3) else (
            "i32" if m.group(1) == "enum" else "agg")
    # typedef RET (CALLCONV *NAME)(...);  function pointers
    for m in re.finditer(r"typedef[^;{}]*?\(\s*(?:\w+\s+)?\*\s*(\w+)\s*\)\s*\(", text):
        kinds[m.group(1)] = "ptr"
    # typedef TYPE NAME;  TYPE *NAME;
    for m in re.finditer(r"typedef\s+((?:const\s+)?[\w ]+?)\s*(\*?)\s*(\w+)\s*;", text):
        base, star, name = m.group(1).strip(), m.group(2), m.group(3)
        if base.split()[0] in ("struct", "union", "enum"):
            continue
        kinds.setdefault(name, "ptr" if star else base.removeprefix("const "))
    return kinds


def _resolve(ctype: str, kinds: dict[str, str]) -> str:
    ctype = re.sub(r"\b(const|volatile|CUDAAPI)\b", " ", ctype)
    if "*" in ctype or "[" in ctype:
        return "ptr"
    name = " ".join(ctype.split())
    for _ in range(20):
        if name in _BUILTIN:
            return _BUILTIN[name]
        if name in ("i32", "u32", "i64", "u64", "ptr", "agg", "f32", "f64"):
            return name
        if name not in kinds:
            raise KeyError(f"unknown C type {ctype!r}")
        name = kinds[name]
    raise KeyError(f"typedef loop at {ctype!r}")


def _param(decl: str, kinds: dict[str, str]) -> str:
    decl = decl.strip()
    m = re.match(r"(.*?)(\w+)\s*(\[\s*\w*\s*\])?$", decl, flags=re.S)
    assert m, decl
    ctype, name = m.group(1), m.group(2)
    if m.group(3):
        ctype += "*"
    return f"{_resolve(ctype, kinds)}:{name}"


def _codes(sig: str) -> tuple[str, ...]:
    return tuple(p.split(":")[0] for p in sig.split(",") if p)


def _sizeof(include: Path, ctype: str) -> int:
    """The size of a runtime struct a served call copies out whole, as the
    C compiler lays it out with these headers."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.c"
        probe.write_text("#include <cuda_runtime_api.h>\n#include <stdio.h>\n"
                         f'int main(void) {{ printf("%zu", sizeof({ctype})); return 0; }}\n')
        subprocess.run(["cc", "-o", str(Path(tmp) / "probe"), str(probe), f"-I{include}"],
                       check=True)
        return int(subprocess.run([str(Path(tmp) / "probe")], capture_output=True, text=True,
                                  check=True).stdout)


def main(include: Path) -> None:
    cuda_h = _strip_comments((include / "cuda.h").read_text())
    typedefs_h = _strip_comments((include / "cudaTypedefs.h").read_text())
    kinds = _typedefs(cuda_h)
    public = typedefs_h.split("#if defined(__CUDA_API_VERSION_INTERNAL)")[0]
    defines: dict[str, tuple[str, str]] = {}
    for m in re.finditer(
            r"#define\s+(cu\w+)\s+(?:__CUDA_API_(PTDS|PTSZ)\(\s*(\w+)\s*\)|(cu\w+))", cuda_h):
        base, flavor = m.group(1), (m.group(2) or "").lower()
        target = m.group(3) or m.group(4)
        if flavor:
            defines[f"{base}/{flavor}"] = (target + "_" + flavor, flavor)
            defines.setdefault(base, (target, ""))
        else:
            defines[base] = (target, "")
    rows: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for m in re.finditer(
            r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\s*\)"
            r"\s*\((.*?)\)\s*;", public, flags=re.S):
        base, version, flavor, params = m.group(1), int(m.group(2)), (m.group(3) or "")[1:], \
            m.group(4)
        decls = [p for p in params.split(",") if p.strip() and p.strip() != "void"]
        sig = ",".join(_param(p, kinds) for p in decls)
        rows.setdefault((base, flavor), []).append((version, sig))
    # the functions cuda.h declares (before its internal section), by the
    # symbol a program compiled against it calls, with their parameter codes
    declared: dict[str, list[tuple[str, str]]] = {}
    head = cuda_h.split("#if defined(__CUDA_API_VERSION_INTERNAL)\n    #undef")[0]
    for m in re.finditer(r"CUresult\s+CUDAAPI\s+(cu\w+)\s*\((.*?)\)\s*;", head, flags=re.S):
        name, params = m.group(1), m.group(2)
        decls = [p for p in params.split(",") if p.strip() and p.strip() != "void"]
        sig = ",".join(_param(p, kinds) for p in decls)
        base = re.sub(r"_v\d+$", "", name)
        declared.setdefault(base, []).append((defines.get(name, (name, ""))[0], _codes(sig)))
    lines = ["# symbol\tbase\tversion\tflavor\tparams  (generated by scripts/gen_driver_api.py "
             "from the CUDA headers; do not edit)"]
    for (base, flavor), versions in sorted(rows.items()):
        versions.sort()
        for i, (version, sig) in enumerate(versions):
            newer_same = any(_codes(s) == _codes(sig) for _, s in versions[i + 1:])
            match = [sym for sym, codes in declared.get(base, []) if codes == _codes(sig)]
            if newer_same or not match:
                symbol = "-"  # an older ABI: reachable through cuGetProcAddress only
            elif flavor:
                symbol = defines.get(f"{base}/{flavor}", (f"{match[0]}_{flavor}", ""))[0]
                if not symbol.startswith(match[0]):
                    symbol = f"{match[0]}_{flavor}"
            else:
                symbol = match[0]
            lines.append(f"{symbol}\t{base}\t{version}\t{flavor or '-'}\t{sig or '-'}")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {len(lines) - 1} entries")
    runtime_h = _strip_comments((include / "cuda_runtime_api.h").read_text())
    names = sorted(set(re.findall(r"CUDARTAPI\s+(cuda\w+)\s*\(", runtime_h)))
    RUNTIME_OUT.write_text("# the CUDA runtime's functions (cuda_runtime_api.h), generated by "
                           "scripts/gen_driver_api.py\n"
                           f"#sizeof cudaDeviceProp {_sizeof(include, 'struct cudaDeviceProp')}\n"
                           + "\n".join(names) + "\n")
    print(f"{RUNTIME_OUT}: {len(names)} functions")


if __name__ == "__main__":
    default = Path(sys.prefix) / "lib/python3.11/site-packages/nvidia/cu13/include"
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else default)

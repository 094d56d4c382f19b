"""`make demo`: compile a bundled buggy sample to PTX with NVRTC and show
what gpusafe sees in it (`gpusafe inspect`).

When `gpusafe run` lands, the demo runs the sample program under it instead.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples"))

from nvrtc import compile_to_ptx  # noqa: E402


def main() -> int:
    source = ROOT / "samples" / "vector_add_oob.cu"
    ptx_text = compile_to_ptx(source.read_text(), source.name)
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path = Path(tmp) / "vector_add_oob.ptx"
        ptx_path.write_text(ptx_text)
        print(f"$ gpusafe inspect {ptx_path.name}   "
              f"(compiled from samples/{source.name} by NVRTC)\n", flush=True)
        return subprocess.call([sys.executable, "-m", "gpusafe", "inspect", ptx_path.name],
                               cwd=tmp)


if __name__ == "__main__":
    sys.exit(main())

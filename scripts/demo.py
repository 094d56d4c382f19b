"""`make demo`: run a bundled buggy sample under `gpusafe run` on the CPU device.

The sample (samples/vector_add_oob.py) is an ordinary cuda-python program
whose kernel has an off-by-one bounds test.  gpusafe reports the three bad
accesses and exits with status 86, as a CI job would see it; the demo
succeeds when that is what happened.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    cmd = ["gpusafe", "run", "--device", "cpu", "--", "python", "samples/vector_add_oob.py"]
    print("$ " + " ".join(cmd) + "\n", flush=True)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    rc = subprocess.call([sys.executable, "-m", "gpusafe", *cmd[1:]], cwd=ROOT, env=env)
    print(f"\ngpusafe exit status: {rc} (86: violations found)")
    return 0 if rc == 86 else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the test suite and the benchmarks share: the kernel corpus and its
NVRTC / ptxas / numba / LLVM harness (``gpusafe_testkit.corpus``).

A development kit, not part of the checker: the corpus itself lives in the
repository's ``tests/kernels``, so it works in a checkout (where ``make``
installs it with the project), not from a wheel alone.
"""

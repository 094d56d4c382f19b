"""The CPU device: runs PTX kernels on the CPU with GPU semantics."""

"""gpusafe: a memory-safety checker for CUDA programs."""

__version__ = "0.1.0"

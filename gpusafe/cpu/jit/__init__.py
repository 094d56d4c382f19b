"""The CPU device's compiled engine (the default ``GPUSAFE_CPU_ENGINE=auto`` compiles
the kernels whose work pays for it, :mod:`.tiers`; ``jit`` every kernel).

:mod:`.lower` turns a PTX kernel into LLVM IR, :mod:`.engine` compiles it
with llvmlite and runs a whole launch in one call.  A kernel outside what the
lowering covers raises :class:`~.lower.Unsupported` and runs on the
interpreter; the reason is kept (:func:`gpusafe.cpu.scheduler.run_launch`
puts it on the launch as ``engine_note``)."""

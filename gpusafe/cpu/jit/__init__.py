"""The CPU device's compiled engine (opt-in: ``GPUSAFE_CPU_ENGINE=jit``).

:mod:`.lower` turns a PTX kernel into LLVM IR, :mod:`.engine` compiles it
with llvmlite and runs a whole launch in one call.  A kernel outside what the
lowering covers raises :class:`~.lower.Unsupported` and runs on the
interpreter; the reason is kept (:func:`gpusafe.cpu.scheduler.run_launch`
puts it on the launch as ``engine_note``)."""

"""Doors: how a program's CUDA calls reach the engine.

A door catches calls and binds their arguments; it holds no policy.  The
Python door replaces the functions of ``cuda.bindings.driver`` and
``cuda.bindings.runtime`` (:mod:`.python_driver`, :mod:`.python_runtime`,
sharing the wrapper shapes of :mod:`.wrappers`); the native door (C, at the
driver boundary) will feed the same engine.
"""

"""Facts of the CUDA API surface shared by every layer that speaks it: how
cuda-python's arguments convert (handles, host buffers, ``kernelParams``) and
what a module image is.  The doors, the engine and the CPU device all read
them here, so none of them depends on another for it."""

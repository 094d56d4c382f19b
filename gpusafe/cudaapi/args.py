"""Argument conversions of cuda-python's bindings, for the CPU device's API
surfaces (``gpusafe.cpu.driver``, ``gpusafe.cpu.runtime``) and the engine.

cuda-python converts each Python argument before it calls the C driver; a
value it cannot convert raises a Python exception (``TypeError``,
``OverflowError``, ``RuntimeError``) and never reaches the driver. These
helpers reproduce those conversions so a program gets the same exception
here as against ``cuda.bindings.driver``:

* handles (``CUdevice``, ``CUcontext``, ``CUmodule``, ...): ``None`` is 0, an
  instance of the type is ``int(x)``, anything else goes through ``int(T(x))``;
* C integers (``unsigned int``, ``size_t``, ``int``, ...): an ``int``, or any
  object whose type has ``__int__`` (floats truncate, numpy scalars), then a
  range check (``OverflowError`` outside the C type's range), with Cython's
  messages, see :func:`c_int`;
* host pointers (``_HelperInputVoidPtr``): ``None``, an ``int`` address, a
  ``CUdeviceptr``, or any object with the buffer protocol (numpy arrays,
  ``bytes``, ``bytearray``, ``memoryview``, ctypes objects, ``array.array``),
  contiguous (C or Fortran order); anything else is a ``TypeError``;
* ``kernelParams`` (``_HelperKernelParams``): ``None``, an ``int`` address of a
  ``void*[]``, a buffer-protocol object holding a ``void*[]``, or the
  ``(values, types)`` pair of tuples, see :func:`convert_kernel_params`.
"""

from __future__ import annotations

import ctypes
import enum
import struct
from dataclasses import dataclass, field

import numpy as np
from cuda.bindings import driver as _real

# --------------------------------------------------------------------------
# C integers and handles
# --------------------------------------------------------------------------

_C_TYPES = {
    # name: (smallest, largest, the name Cython's messages give it)
    "unsigned int": (0, 2**32 - 1, "unsigned int"),
    "int": (-(2**31), 2**31 - 1, "int"),
    "size_t": (0, 2**64 - 1, "size_t"),
    "unsigned char": (0, 255, "unsigned char"),
    "unsigned short": (0, 65535, "unsigned short"),
    "void_ptr": (0, 2**64 - 1, "unsigned PY_LONG_LONG"),
    "unsigned long long": (0, 2**64 - 1, "unsigned PY_LONG_LONG"),
}
_ULONG_MAX = 2**64 - 1
_LONG = (-(2**63), 2**63 - 1)


def c_int(value, ctype: str = "unsigned int", name: str = "argument") -> int:
    """Convert like Cython converts a Python object to a C integer argument,
    as cuda-python's bindings do (``name`` is for the reader of the call:
    cuda-python's messages do not name the parameter).

    An ``int`` (``bool``, an ``IntEnum``) is taken as it is; any other
    object through its type's ``__int__``, so a float or a numpy scalar is
    truncated toward zero (``196.3125`` is 196, as NVIDIA's vectorAddDrv
    passes it), a float NaN is a ``ValueError`` and an infinity an
    ``OverflowError`` (what ``__int__`` raises); an object without
    ``__int__`` (``None``, ``str``, a ctypes number, a buffer) is
    ``TypeError("an integer is required")``.  A value outside the C type is
    an ``OverflowError`` with Cython's words."""
    v = python_int(value)
    lo, hi, shown = _C_TYPES[ctype]
    if lo == 0:
        if v < 0:
            raise OverflowError(f"can't convert negative value to {shown}")
        if v > _ULONG_MAX:
            raise OverflowError("Python int too large to convert to C unsigned long")
    elif not _LONG[0] <= v <= _LONG[1]:
        raise OverflowError("Python int too large to convert to C long")
    if not lo <= v <= hi:
        raise OverflowError(f"value too large to convert to {shown}")
    return v


def python_int(value) -> int:
    """The Python int Cython makes of an object before it checks the C range:
    an ``int`` as it is, anything else through its type's ``__int__``."""
    if isinstance(value, int):
        return int(value)
    to_int = getattr(type(value), "__int__", None)
    if to_int is None:
        raise TypeError("an integer is required")
    v = to_int(value)
    if not isinstance(v, int):
        raise TypeError(f"__int__ returned non-int (type {type(v).__name__})")
    return int(v)


def handle_value(value, cls) -> int:
    """The integer a cuda-python binding passes to C for a handle argument."""
    if value is None:
        return 0
    if isinstance(value, cls):
        return int(value)
    return int(cls(value))


def require_enum(value, cls, name: str):
    """An enum argument (``attrib not None : CUdevice_attribute``) as
    cuda-python 13 converts it: None is a ``TypeError``; any other value is
    taken by its ``.value`` (an ``AttributeError`` for an object without
    one, as there), so a member of a twin enum (``cudaDeviceAttr`` for
    ``CUdevice_attribute``) means the member of ``cls`` with that value.
    Returns that member; a value ``cls`` does not have is a ``ValueError``
    (where a driver would answer ``CUDA_ERROR_INVALID_VALUE``)."""
    if value is None:
        raise TypeError(f"Argument '{name}' must not be None")
    if isinstance(value, cls):
        return value
    return cls(c_int(value.value, "int"))


def require_struct(value, cls, name: str) -> None:
    """A cuda-bindings struct argument (``CUDA_KERNEL_NODE_PARAMS``,
    ``CUlaunchConfig``, ...) of exactly its class, refused as the real module
    refuses anything else."""
    if not isinstance(value, cls):
        raise TypeError(f"Argument '{name}' has incorrect type (expected "
                        f"{cls.__module__}.{cls.__name__}, got {type(value).__name__})")


def require_bytes(value, name: str) -> bytes:
    """``char* name``: Cython accepts bytes and bytearray, never str
    (``name`` is for the reader: the message does not name it)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise TypeError(f"expected bytes, {type(value).__name__} found")


# --------------------------------------------------------------------------
# host pointers
# --------------------------------------------------------------------------


@dataclass
class HostPtr:
    """A host address as the C driver would see it, with the buffer's length when known."""

    address: int
    nbytes: int | None = None  # None: a raw int address, length unknown
    keep: object = None  # keeps a buffer alive while the address is used


_CTYPES_DATA = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)


def host_pointer(obj) -> HostPtr:
    """``_HelperInputVoidPtr``: the host address cuda-python passes for ``obj``."""
    if obj is None:
        return HostPtr(0)
    if isinstance(obj, int):
        return HostPtr(c_int(obj, "void_ptr"))
    if isinstance(obj, _real.CUdeviceptr):
        return HostPtr(int(obj))
    if isinstance(obj, np.ndarray):
        if not (obj.flags.c_contiguous or obj.flags.f_contiguous):
            raise ValueError("ndarray is not contiguous")  # what numpy's buffer export says
        return HostPtr(obj.ctypes.data, obj.nbytes, obj)
    if isinstance(obj, _CTYPES_DATA):
        return HostPtr(ctypes.addressof(obj), ctypes.sizeof(obj), obj)
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(  # sic: cuda-python names type(int), "<class 'type'>"
            f"Provided argument is of type {type(obj)} but expected Type {type(None)}, "
            f"{type(int)} or object with Buffer Protocol"
        ) from None
    if not mv.contiguous:
        raise BufferError(f"{type(obj).__name__}: underlying buffer is not contiguous")
    if mv.nbytes == 0:
        return HostPtr(0 if not isinstance(obj, bytes) else _bytes_address(obj), 0, obj)
    if isinstance(obj, bytes):
        return HostPtr(_bytes_address(obj), len(obj), obj)
    try:
        arr = np.frombuffer(obj, dtype=np.uint8)
    except (TypeError, ValueError, BufferError):
        # Fortran-ordered: the same memory, whose start numpy finds
        arr = np.asarray(mv)
    return HostPtr(arr.ctypes.data, mv.nbytes, (obj, mv, arr))


def _bytes_address(b: bytes) -> int:
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value or 0


def read_host(address: int, nbytes: int) -> bytes:
    return ctypes.string_at(address, nbytes)


def host_view(address: int, nbytes: int) -> np.ndarray:
    """A uint8 numpy view of ``nbytes`` of host memory at ``address`` (no copy)."""
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(address))


def write_host(address: int, data: bytes) -> None:
    ctypes.memmove(address, data, len(data))


def read_c_string(address: int) -> bytes:
    return ctypes.string_at(address)


# --------------------------------------------------------------------------
# kernel parameters
# --------------------------------------------------------------------------

_SUPPORTED_CTYPES = (
    ctypes.c_bool, ctypes.c_char, ctypes.c_wchar, ctypes.c_byte, ctypes.c_ubyte,
    ctypes.c_short, ctypes.c_ushort, ctypes.c_int, ctypes.c_uint, ctypes.c_long,
    ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong, ctypes.c_size_t,
    ctypes.c_float, ctypes.c_double,
)
_MAX_PARAM_SIZE = max(8, max(ctypes.sizeof(t) for t in _SUPPORTED_CTYPES))


@dataclass
class KernelParams:
    """kernelParams after cuda-python's conversion, before the driver reads it.

    ``kind`` is ``"null"`` (no array), ``"array"`` (a ``void*[]`` at ``address``,
    of unknown length) or ``"tuple"`` (the ``(values, types)`` form: ``sources``
    holds, per parameter, ``("data", offset)`` into ``data`` or ``("addr",
    address)``).
    """

    kind: str
    address: int = 0
    sources: list[tuple[str, int]] = field(default_factory=list)
    data: bytes = b""
    keep: object = None

    def param_bytes(self, index: int, size: int) -> bytes | None:
        """The ``size`` bytes the driver copies for parameter ``index`` (None: NULL pointer)."""
        if self.kind == "array":
            ptr = ctypes.c_void_p.from_address(self.address + 8 * index).value or 0
            if ptr == 0:
                return None
            return ctypes.string_at(ptr, size)
        kind, where = self.sources[index]
        if kind == "addr":
            return ctypes.string_at(where, size) if where else None
        chunk = self.data[where:where + size]
        return chunk + bytes(size - len(chunk))  # the calloc'd area ends in zeros


def convert_kernel_params(kernel_params) -> KernelParams:
    """``_HelperKernelParams``: convert ``kernelParams`` as cuda-python does.

    Rules (cuda-python 12.x/13.x): ``None`` is NULL; an ``int`` is the address of
    a ``void*`` array; a buffer-protocol object is such an array in place; a
    pair ``(values, types)`` of equal-length tuples is packed per type:

    * a ctypes scalar type (c_bool ... c_double): the value converted to it
      (a ``c_float`` value for a ``c_double`` type is widened);
    * ``ctypes.c_void_p``: an ``int`` or ``c_void_p`` is the pointer value, an
      object with ``getPtr()`` contributes ``getPtr()`` (the address of the
      binding object, not the value it holds);
    * ``None``: an object with ``getPtr()`` (``CUdeviceptr`` and every other
      binding type) is passed by reference to its storage, so the kernel
      receives its value; a ``ctypes.Structure`` by reference; an ``Enum`` as a
      C ``int``.
    """
    if kernel_params is None:
        return KernelParams("null")
    if isinstance(kernel_params, int):
        return KernelParams("array" if kernel_params else "null", address=int(kernel_params))
    if isinstance(kernel_params, tuple) and len(kernel_params) == 2 and \
            isinstance(kernel_params[0], tuple) and isinstance(kernel_params[1], tuple):
        return _convert_tuple_form(*kernel_params)
    try:
        memoryview(kernel_params)
    except TypeError:
        raise TypeError(
            "Argument 'kernelParams' is not a valid type: tuple[tuple[Any, ...], tuple[Any, ...]] "
            "or PyObject implimenting Buffer Protocol or Int"
        ) from None
    try:
        hp = host_pointer(kernel_params)
    except (ValueError, BufferError):
        raise RuntimeError(
            "Argument 'kernelParams' failed to retrieve buffer through Buffer Protocol") from None
    return KernelParams("array" if hp.address else "null", address=hp.address, keep=hp.keep)


def _convert_tuple_form(values: tuple, types: tuple) -> KernelParams:
    if len(values) != len(types):
        raise TypeError("Argument 'kernelParams' has tuples with different length")
    data = bytearray(len(values) * _MAX_PARAM_SIZE)
    sources: list[tuple[str, int]] = []
    keep = []
    idx = 0
    for value, ctype in zip(values, types, strict=True):
        if ctype is None:
            if callable(getattr(value, "getPtr", None)):
                sources.append(("addr", int(value.getPtr())))
                keep.append(value)
            elif isinstance(value, ctypes.Structure):
                sources.append(("addr", ctypes.addressof(value)))
                keep.append(value)
            elif isinstance(value, enum.Enum):
                sources.append(("data", idx))
                data[idx:idx + 4] = struct.pack("<i", int(value.value))
                idx += 4
            else:
                raise TypeError(
                    f"Provided argument is of type {type(value)} but expected Type "
                    f"{type(ctypes.Structure)}, {type(ctypes.c_void_p)} or CUDA Binding structure "
                    "with getPtr() attribute")
        elif ctype in _SUPPORTED_CTYPES:
            if ctype is ctypes.c_double and isinstance(value, ctypes.c_float):
                value = ctype(value.value)
            if not isinstance(value, ctype):
                value = ctype(value)
            raw = ctypes.string_at(ctypes.addressof(value), ctypes.sizeof(value))
            sources.append(("data", idx))
            data[idx:idx + len(raw)] = raw
            idx += len(raw)
        elif ctype is ctypes.c_void_p:
            if isinstance(value, (int, ctypes.c_void_p)):
                ptr = (value.value or 0) if isinstance(value, ctypes.c_void_p) else int(value)
            elif callable(getattr(value, "getPtr", None)):
                ptr = int(value.getPtr())
                keep.append(value)
            else:
                raise TypeError(  # sic: cuda-python names type(int), "<class 'type'>"
                    f"Provided argument is of type {type(value)} but expected Type {type(int)}, "
                    f"{type(ctypes.c_void_p)} or CUDA Binding structure with getPtr() attribute")
            sources.append(("data", idx))
            data[idx:idx + 8] = struct.pack("<Q", ptr & (2**64 - 1))
            idx += 8
        else:
            raise TypeError("Unsupported type: " + str(type(ctype)))
    return KernelParams("tuple", sources=sources, data=bytes(data), keep=keep)


def read_extra(extra: int) -> tuple[int | None, int | None]:
    """Parse a ``void* extra[]`` (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE/END).

    Returns ``(buffer address, buffer size)``; either is None when absent.
    Raises ValueError for a key the driver does not know.
    """
    buf = size = None
    pos = extra
    for _ in range(64):
        key = ctypes.c_void_p.from_address(pos).value or 0
        if key == _real.CU_LAUNCH_PARAM_END_AS_INT:
            return buf, size
        val = ctypes.c_void_p.from_address(pos + 8).value or 0
        if key == _real.CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT:
            buf = val
        elif key == _real.CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT:
            size = ctypes.c_size_t.from_address(val).value if val else None
        else:
            raise ValueError(f"unknown key {key:#x} in the extra array")
        pos += 16
    raise ValueError("the extra array has no CU_LAUNCH_PARAM_END within 32 entries")

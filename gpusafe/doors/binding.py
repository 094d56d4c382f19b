"""Arguments bound the way the real function binds them.

cuda-python's functions have real signatures, and programs call them with
keywords (``cuMemcpyHtoD(dstDevice=d, srcHost=h, ByteCount=n)``).  A wrapper
reads its arguments by position; :func:`bound` puts keyword calls into that
shape first, against the signature of the function the program meant, so a
keyword call behaves exactly as it would without gpusafe (a bad keyword is
the same ``TypeError``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any


def bound(original: Callable[..., Any], wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` (which takes positional arguments) called with the arguments
    of any call that ``original`` accepts."""
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            if signature is None:
                raise TypeError(f"{original.__name__}() takes no keyword arguments")
            b = signature.bind(*args, **kwargs)
            b.apply_defaults()
            return wrapper(*b.args, **b.kwargs)
        return wrapper(*args)

    return call

"""The public face of the PTX front end: ``from instrument import ptx``.

``ptx.parse(text) -> Module``, ``ptx.emit(module) -> str`` and
``ptx.ParseError``; the node classes are re-exported for passes.
"""

from .nodes import *  # noqa: F403  (the node classes are part of this API)
from .nodes import Module
from .parser import ParseError, parse
from .printer import emit

__all__ = ["parse", "emit", "ParseError", "Module"]

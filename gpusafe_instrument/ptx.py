"""The public face of the PTX front end: ``from gpusafe_instrument import ptx``.

``ptx.parse(text) -> Module``, ``ptx.parse_items(text)`` (the items one at a
time), ``ptx.emit(module) -> str`` and ``ptx.ParseError``; the node classes
are re-exported for passes.
"""

from .nodes import *  # noqa: F403  (the node classes are part of this API)
from .nodes import Module
from .parser import ParseError, parse, parse_items
from .printer import emit

__all__ = ["parse", "parse_items", "emit", "ParseError", "Module"]

"""The exit statuses gpusafe itself gives (DESIGN.md "Exit status of gpusafe run").

Defined once: every command and every module that ends a gpusafe process with
a status of its own takes it from here.
"""

from __future__ import annotations

EXIT_TOOL_ERROR = 2
"""gpusafe could not do its job (bad input, a file it cannot write, a bad flag,
an internal error, a call the device could not serve, a kernel that ran
unchecked without ``--allow-unchecked``): never a violation, never a clean pass."""

EXIT_VIOLATIONS = 86
"""The default ``--error-exitcode``: the program ran and a violation was found."""

EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C (SIGINT), as a shell reports it."""

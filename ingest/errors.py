"""How an exception is told in one line: in error messages, quarantine reasons and hit records."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first non-blank line of the exception's message, or its type's name."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__

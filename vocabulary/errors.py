"""How an exception is told in one line: in error messages, quarantine reasons and hit records.
A foundation: every stage reports the compiler's and the parsers' errors this way."""

from __future__ import annotations


def first_line(exc: BaseException, lines: int = 1) -> str:
    """The first non-blank line of the exception's message (the first `lines` of them, joined
    by " / "), or its type's name."""
    told = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " / ".join(told[:lines]) if told else type(exc).__name__

"""How names and messages are shown to people: whole and on one line."""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` on one line: control characters (newline, tab, ...) shown as escapes, so that two
    different names never print the same and a name never breaks a log line."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )

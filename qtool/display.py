"""How names and messages are shown to people: whole, on one line, and never as commands to
the terminal.

Names come from models and file names, which anyone may have chosen: a control character (an
escape sequence that clears the screen, hides text or sets a window title), a C1 control, a
bidirectional override or a line break would otherwise act on the terminal or forge log lines.
`printable` shows each as an escape instead.
"""

from __future__ import annotations


def _escaped(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """`text` on one line: control characters (newline, tab, ESC, C1 controls, bidirectional
    overrides...) shown as escapes, so that two different names never print the same, a name
    never breaks a log line and never drives the terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def printable_lines(text: str) -> str:
    """`printable`, line breaks kept: for text already laid out in lines (a rendered table)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else _escaped(ch) for ch in text)

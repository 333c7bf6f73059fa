"""Stored and user-supplied text made safe to print on a terminal (one place).

A failure message, payload, key or log extra may hold characters a terminal acts on
instead of showing: ``ESC [2J`` clears the screen, ``ESC ] 0;... BEL`` retitles the
window, ``U+202E`` reverses what follows. The CLI's tables and lines and its text log
lines pass such text through :func:`printable`, which shows each of these characters
as a visible escape (``\\x1b``, ``\\u202e``) instead. JSON output needs none of this:
JSON escapes control characters itself.
"""

from __future__ import annotations

import re

import click

UNSAFE_CHARACTERS = re.compile(
    "["
    "\x00-\x1f\x7f-\x9f"  # C0 controls, DEL, C1 controls (Unicode category Cc)
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional formatting
    "\u2028\u2029"  # line and paragraph separators
    "\ud800-\udfff"  # lone surrogates (cannot be written as UTF-8)
    "]"
)
"""What :func:`printable` escapes: every character that moves the cursor, starts a
terminal command, reorders the text around it or cannot be encoded. Other format
characters (zero-width joiners, soft hyphens) are shown as they are: written text
needs them and they command nothing."""
BLOCK_KEEPS = "\n\t"
"""What a multi-line block (a traceback, an ``error:`` message) keeps raw: its line
breaks and tabs."""
SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
"""The escapes Python's own ``repr`` uses for these three, easier to read than ``\\x0a``."""


def _escape(char: str) -> str:
    if char in SHORT_ESCAPES:
        return SHORT_ESCAPES[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"  # every unsafe character is in the Basic Multilingual Plane


def printable(text: str, keep: str = "") -> str:
    """``text`` with each unsafe character shown as ``\\n``, ``\\r``, ``\\t``,
    ``\\xNN`` or ``\\uNNNN``; the characters in ``keep`` (``BLOCK_KEEPS`` for a
    multi-line block) stay as they are. A backslash already in the text is left alone,
    so the escape of ESC and the four characters ``\\x1b`` print alike."""
    if text.isprintable():  # nothing unsafe: the common case, without a regex pass
        return text
    return UNSAFE_CHARACTERS.sub(
        lambda found: found[0] if found[0] in keep else _escape(found[0]), text
    )


def echo(line: str, err: bool = False) -> None:
    """``click.echo`` of one line, its unsafe characters (line breaks too) escaped."""
    click.echo(printable(line), err=err)

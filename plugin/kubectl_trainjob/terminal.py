"""Cluster strings made safe to print on a terminal (pure).

Any name, metric or message in the cluster was written by someone else: printed as is,
an escape sequence in it can clear the screen, recolour or rewrite what is shown, set
the window title or plant a hyperlink (OSC 8), and a bidirectional override can make
text read other than it is stored. ``printable`` keeps the text and drops all of that;
the table shows it through ``rich.text.Text``, never as markup, so ``[red]`` stays
literal too.
"""

from __future__ import annotations

import re

# Whole escape sequences first, so their parameters do not stay behind as text:
# CSI (ESC [ or 8-bit CSI ... final byte), strings ended by BEL or ST (OSC, DCS, SOS,
# PM, APC, in 7- and 8-bit forms; an unended one runs to the end), two-byte escapes.
_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[\x20-\x7e]?"
)
# Line breaks and tabs become a space: the value stays on its row.
_BREAKS = re.compile(r"[\t\n\v\f\r\x85\u2028\u2029]")
# Every other control: C0, DEL, C1, the bidirectional marks, embeddings, overrides and
# isolates, and lone surrogates (no terminal encoding can write one).
_BIDI = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROLS = re.compile(rf"[\x00-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
_BIDI_CONTROLS = re.compile(rf"[{_BIDI}]")


def printable(text: str) -> str:
    """``text`` with escape sequences and control characters removed, line breaks and
    tabs as spaces; everything else as it was."""
    return _CONTROLS.sub("", _BREAKS.sub(" ", _SEQUENCES.sub("", text)))


def has_bidi_control(text: str) -> bool:
    """Whether ``text`` holds a bidirectional mark, embedding, override or isolate."""
    return _BIDI_CONTROLS.search(text) is not None

"""Request body content codings (``Content-Encoding``), decoded under a size limit (pure).

The server decodes bodies itself rather than letting aiohttp do it: aiohttp reports a
body that does not decode as an exception from the body stream, which the request path
cannot tell from a broken connection, and whether it takes ``br`` and ``zstd`` depends
on which optional libraries are installed. Here every
outcome is a decision the endpoint answers: gzip and deflate are decoded, ``identity``
is no coding, anything else is refused before the body is read (415, as RFC 9110
15.5.16 and the API server's UnsupportedMediaType answer it), a body that does not
decode is a bad request (400), and the decoded size counts against the body limit.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # What zlib.decompressobj() returns, by its name in the type stubs.
    from zlib import _Decompress as Inflater

ACCEPTED = "gzip, deflate"
"""What the ``Accept-Encoding`` header of a 415 answer lists (RFC 9110 12.5.3)."""

_ALIASES = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
# zlib window bits: gzip wrapper only; zlib wrapper (RFC 1950); bare deflate (RFC 1951),
# which some clients send as "deflate".
_GZIP, _ZLIB, _RAW = 16 + zlib.MAX_WBITS, zlib.MAX_WBITS, -zlib.MAX_WBITS


class UnsupportedCoding(Exception):
    """A ``Content-Encoding`` the server does not decode (the message says which)."""


class CodingError(Exception):
    """A body that does not decode as its ``Content-Encoding`` says (the message says why)."""


class TooLarge(Exception):
    """The decoded body is larger than the limit."""


def body_coding(header: str | None) -> str | None:
    """The one coding to undo for a ``Content-Encoding`` header: "gzip", "deflate" or None
    (absent, empty or only ``identity``). UnsupportedCoding for any other coding, and for
    more than one: a status post is small, stacking codings buys nothing."""
    if header is None:
        return None
    tokens = [t.strip().lower() for t in header.split(",")]
    codings = [t for t in tokens if t and t != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise UnsupportedCoding(
            f"Content-Encoding {_quote(header)} is not supported: use one of {ACCEPTED}"
        )
    coding = _ALIASES.get(codings[0])
    if coding is None:
        raise UnsupportedCoding(
            f"Content-Encoding {_quote(codings[0])} is not supported: use {ACCEPTED} or none"
        )
    return coding


@dataclass
class Decoder:
    """Undoes ``coding`` on a body fed in chunks, keeping the decoded size within
    ``limit`` bytes: a small compressed body cannot expand past it in memory."""

    coding: str
    limit: int
    size: int = 0

    def __post_init__(self) -> None:
        self._inflate: Inflater | None = None

    def feed(self, chunk: bytes) -> bytes:
        """The decoded bytes ``chunk`` completes; CodingError or TooLarge."""
        out: list[bytes] = []
        while chunk:
            if self._inflate is None or self._inflate.eof:
                if self._inflate is not None and self.coding == "deflate":
                    raise CodingError(self._message("has data after the end of the stream"))
                self._inflate = zlib.decompressobj(self._wbits(chunk))
            # One byte past the room left is enough to tell "too large" from "fits".
            room = self.limit - self.size + 1
            try:
                data = self._inflate.decompress(chunk, room)
            except zlib.error as exc:
                raise CodingError(self._message(f"does not decode ({_zlib_reason(exc)})")) from None
            self.size += len(data)
            if self.size > self.limit:
                raise TooLarge
            out.append(data)
            # What zlib did not take yet (output bound) or what follows a finished
            # stream (a further gzip member) is fed again.
            chunk = self._inflate.unconsumed_tail or self._inflate.unused_data
        return b"".join(out)

    def finish(self) -> None:
        """CodingError if the body ended inside a compressed stream (or held none)."""
        if self._inflate is None or not self._inflate.eof:
            raise CodingError(self._message("ends before its compressed data does"))

    def _wbits(self, first: bytes) -> int:
        if self.coding == "gzip":
            return _GZIP
        # A zlib stream's first byte names the deflate method (low nibble 8).
        return _ZLIB if first[0] & 0x0F == 8 else _RAW

    def _message(self, problem: str) -> str:
        return f"Request body with Content-Encoding {_quote(self.coding)} {problem}"


def _zlib_reason(exc: zlib.error) -> str:
    # "Error -3 while decompressing data: incorrect header check" -> the part after ": ".
    return str(exc).rpartition(": ")[2] or "invalid data"


def _quote(text: str) -> str:
    """``text`` quoted for a message, printable ASCII only (the header is the client's)."""
    cleaned = "".join(c if " " <= c <= "~" and c != '"' else "?" for c in text[:64])
    return f'"{cleaned}"'

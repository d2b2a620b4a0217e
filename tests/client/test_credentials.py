"""Token and CA files: cached, re-read when the file changes, when the token's exp is near
and after invalidate(); an unreadable file never raises and its error never holds the
token."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
import trustme

from trainjob_status.credentials import CAFile, TokenFile, jwt_expiry

from .sink import make_token

NOW = 1_800_000_000.0


def test_token_is_cached_until_the_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "token"
    first = make_token("a", NOW + 3600)
    path.write_text(first + "\n")
    tokens = TokenFile(str(path), clock=lambda: NOW)
    assert tokens.get() == first
    assert tokens.get() == first
    assert tokens.reads == 1
    second = make_token("b", NOW + 3600)
    (tmp_path / "next").write_text(second)
    (tmp_path / "next").replace(path)  # kubelet swaps files atomically
    assert tokens.get() == second
    assert tokens.reads == 2


def test_token_is_reread_when_exp_is_near_even_if_the_file_looks_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "token"
    old = make_token("a", NOW + 30)  # within the 60 s margin
    new = make_token("b", NOW + 3600)
    assert len(old) == len(new)
    path.write_text(old)
    tokens = TokenFile(str(path), clock=lambda: NOW)
    assert tokens.get() == old
    stat = path.stat()
    path.write_text(new)  # same inode and size; put the mtime back
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tokens.get() == new


def test_token_not_near_exp_and_unchanged_file_is_not_reread(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(make_token("a", NOW + 3600))
    tokens = TokenFile(str(path), clock=lambda: NOW)
    tokens.get()
    stat = path.stat()
    path.write_text(make_token("b", NOW + 3600))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tokens.reads == 1
    tokens.get()
    assert tokens.reads == 1
    tokens.invalidate()  # what a 401 does
    assert tokens.get() == make_token("b", NOW + 3600)
    assert tokens.reads == 2


@pytest.mark.parametrize("content", [b"", b"two words", b"\xff\xfe", None])
def test_unreadable_token_gives_none_and_a_reason_without_content(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_bytes(content)
    tokens = TokenFile(str(path))
    assert tokens.get() is None
    assert tokens.error is not None
    assert str(path) in tokens.error
    assert "two" not in tokens.error


def test_no_token_path_means_no_token() -> None:
    tokens = TokenFile(None)
    assert tokens.get() is None
    assert tokens.error is None


@pytest.mark.parametrize(
    ("token", "exp"),
    [
        (make_token("a", 1234), 1234.0),
        (make_token("a"), None),
        ("not-a-jwt", None),
        ("a.!!!.c", None),
        ("a.bnVsbA.c", None),  # "null"
    ],
)
def test_jwt_expiry(token: str, exp: float | None) -> None:
    assert jwt_expiry(token) == exp


def test_ca_context_is_rebuilt_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "ca.crt"
    path.write_bytes(trustme.CA().cert_pem.bytes())
    ca = CAFile(str(path))
    first = ca.context()
    assert ca.context() is first
    assert first.check_hostname
    assert first.verify_mode == ssl.CERT_REQUIRED
    (tmp_path / "next").write_bytes(trustme.CA().cert_pem.bytes())
    (tmp_path / "next").replace(path)
    assert ca.context() is not first
    assert ca.loads == 2


def test_missing_ca_file_raises_oserror_for_the_sender_to_back_off(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        CAFile(str(tmp_path / "missing")).context()

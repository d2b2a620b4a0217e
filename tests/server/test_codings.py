"""Compressed request bodies: gzip and deflate decoded under the body limit, a body that
does not decode is 400, a coding the server does not decode is 415, over real sockets
with nothing written and no error logged; and the decoding decisions directly."""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from typing import Any

import pytest

from trainjob_devcluster import DevCluster
from trainjob_status_server.http.codings import (
    CodingError,
    Decoder,
    TooLarge,
    UnsupportedCoding,
    body_coding,
)

from .conftest import GROUP, NS, Poster, status_path

LUT = "2026-12-02T18:33:25Z"
UPDATE = {"trainerStatus": {"progressPercentage": 7, "lastUpdatedTime": LUT}}


@pytest.fixture
def trainjob(devcluster: DevCluster) -> str:
    devcluster.create_trainjob(NS, "tj")
    return "tj"


def resource_version(devcluster: DevCluster) -> str:
    obj = devcluster.get("trainjobs", NS, "tj", GROUP)
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


def trainer_status(devcluster: DevCluster) -> Any:
    obj = devcluster.get("trainjobs", NS, "tj", GROUP)
    assert obj is not None
    return (obj.get("status") or {}).get("trainerStatus")


async def post_encoded(poster: Poster, raw: bytes, coding: str) -> tuple[int, Any, Any]:
    code, body, response = await poster.request(
        "POST",
        status_path(NS, "tj"),
        raw,
        {"Authorization": "Bearer t", "Content-Encoding": coding},
    )
    await poster.server.writer.wait_idle()
    return code, body, response


def no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert all(r.exc_info is None for r in caplog.records)


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),  # zlib-wrapped, as RFC 9110 defines "deflate"
        ("deflate", lambda b: zlib.compress(b, wbits=-15)),  # bare, as some clients send
        ("GZIP, identity", gzip.compress),
    ],
)
async def test_compressed_posts_are_decoded_and_written(
    poster: Poster, devcluster: DevCluster, trainjob: str, coding: str, encode: Any
) -> None:
    code, body, _ = await post_encoded(poster, encode(json.dumps(UPDATE).encode()), coding)
    assert (code, body) == (200, UPDATE)
    assert trainer_status(devcluster) == UPDATE["trainerStatus"]


@pytest.mark.parametrize(
    ("coding", "raw", "message"),
    [
        (
            "gzip",
            b'{"trainerStatus": {"progressPercentage": 7}}',
            'Request body with Content-Encoding "gzip" does not decode (incorrect header check)',
        ),
        (
            "deflate",
            b"\x78\x9c not deflate at all",
            'Request body with Content-Encoding "deflate" does not decode '
            "(invalid stored block lengths)",
        ),
        (
            "gzip",
            gzip.compress(json.dumps(UPDATE).encode())[:-12],
            'Request body with Content-Encoding "gzip" ends before its compressed data does',
        ),
        (
            "gzip",
            gzip.compress(json.dumps(UPDATE).encode()) + b"trailing",
            'Request body with Content-Encoding "gzip" does not decode (incorrect header check)',
        ),
        (
            "gzip",
            b"",
            'Request body with Content-Encoding "gzip" ends before its compressed data does',
        ),
    ],
)
async def test_a_body_that_does_not_decode_is_400_and_logs_no_error(
    poster: Poster,
    devcluster: DevCluster,
    trainjob: str,
    caplog: pytest.LogCaptureFixture,
    coding: str,
    raw: bytes,
    message: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    before = resource_version(devcluster)
    code, body, response = await post_encoded(poster, raw, coding)
    assert code == 400
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "BadRequest",
        "code": 400,
    }
    assert response.headers["Connection"] == "close"
    assert resource_version(devcluster) == before
    no_errors_logged(caplog)


async def test_a_gzip_body_that_expands_past_64_kib_is_413(
    poster: Poster, devcluster: DevCluster, trainjob: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    before = resource_version(devcluster)
    head = json.dumps(UPDATE)[:-1]
    bomb = gzip.compress((head + ', "pad": "' + "x" * 10_000_000 + '"}').encode())
    assert len(bomb) < 65_536
    code, body, _ = await post_encoded(poster, bomb, "gzip")
    assert (code, body["reason"], body["message"]) == (
        413,
        "RequestEntityTooLarge",
        "Payload too large",
    )
    assert resource_version(devcluster) == before
    no_errors_logged(caplog)


async def test_a_gzip_body_that_expands_to_exactly_64_kib_is_accepted(
    poster: Poster, devcluster: DevCluster, trainjob: str
) -> None:
    head = json.dumps(UPDATE)[:-1]
    filler = 65_536 - len(head) - len(', "pad": ""}')
    raw = (head + ', "pad": "' + "x" * filler + '"}').encode()
    assert len(raw) == 65_536
    assert (await post_encoded(poster, gzip.compress(raw), "gzip"))[0] == 200
    code, body, _ = await post_encoded(poster, gzip.compress(raw[:-2] + b'x"}'), "gzip")
    assert (code, body["reason"]) == (413, "RequestEntityTooLarge")


@pytest.mark.parametrize(
    ("coding", "message"),
    [
        ("br", 'Content-Encoding "br" is not supported: use gzip, deflate or none'),
        ("zstd", 'Content-Encoding "zstd" is not supported: use gzip, deflate or none'),
        ("compress", 'Content-Encoding "compress" is not supported: use gzip, deflate or none'),
        ("gzip, gzip", 'Content-Encoding "gzip, gzip" is not supported: use one of gzip, deflate'),
    ],
)
async def test_a_coding_the_server_does_not_decode_is_415(
    poster: Poster,
    devcluster: DevCluster,
    trainjob: str,
    caplog: pytest.LogCaptureFixture,
    coding: str,
    message: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    before = resource_version(devcluster)
    # The bytes are a valid update: only the header is refused.
    code, body, response = await post_encoded(poster, json.dumps(UPDATE).encode(), coding)
    assert code == 415
    assert (body["reason"], body["message"], body["code"]) == (
        "UnsupportedMediaType",
        message,
        415,
    )
    assert response.headers["Accept-Encoding"] == "gzip, deflate"
    assert resource_version(devcluster) == before
    no_errors_logged(caplog)


def test_body_coding_of_headers() -> None:
    assert body_coding(None) is None
    assert body_coding("") is None
    assert body_coding("identity") is None
    assert body_coding(" Identity , ") is None
    assert body_coding("gzip") == "gzip"
    assert body_coding("X-GZIP") == "gzip"
    assert body_coding("identity, deflate") == "deflate"
    with pytest.raises(UnsupportedCoding, match='"br"'):
        body_coding("br")
    with pytest.raises(UnsupportedCoding, match=r'"\?\[2jx"'):
        body_coding("\x1b[2Jx")


def test_decoder_takes_chunks_and_gzip_members() -> None:
    data = b'{"a": 1}' * 100
    packed = gzip.compress(data[:400]) + gzip.compress(data[400:])
    decoder = Decoder("gzip", 800)
    out = b"".join(decoder.feed(packed[i : i + 7]) for i in range(0, len(packed), 7))
    decoder.finish()
    assert out == data


def test_decoder_bounds_the_decoded_size_not_the_compressed_one() -> None:
    decoder = Decoder("gzip", 1000)
    with pytest.raises(TooLarge):
        decoder.feed(gzip.compress(b"x" * 1001))
    exact = Decoder("deflate", 1000)
    assert exact.feed(zlib.compress(b"x" * 1000)) == b"x" * 1000
    exact.finish()


def test_decoder_refuses_data_after_a_deflate_stream() -> None:
    decoder = Decoder("deflate", 1000)
    with pytest.raises(CodingError, match="has data after the end of the stream"):
        decoder.feed(zlib.compress(b"{}") + b"x")

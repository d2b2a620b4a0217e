"""The answers' exact headers on both ports: no ``Server`` header (aiohttp would name
itself and the Python version), whatever the answer, error answers included."""

from __future__ import annotations

import json

import pytest

from trainjob_devcluster import DevCluster

from .conftest import NS, Poster, status_path

LUT = "2026-12-02T18:33:25Z"
POST = json.dumps({"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": LUT}})
JSON_ANSWER = ["Content-Length", "Content-Type", "Date", "X-Request-Id"]


def names(raw_headers: tuple[tuple[bytes, bytes], ...]) -> list[str]:
    return sorted(name.decode() for name, _ in raw_headers)


@pytest.mark.parametrize(
    ("method", "path", "data", "code", "expected"),
    [
        ("POST", status_path(NS, "tj"), POST.encode(), 200, JSON_ANSWER),
        ("POST", status_path(NS, "missing"), POST.encode(), 404, JSON_ANSWER),
        ("POST", status_path(NS, "tj"), b"[]", 422, JSON_ANSWER),
        (
            "POST",
            status_path(NS, "tj"),
            b"{" + b" " * 70_000 + b"}",
            413,
            [*JSON_ANSWER, "Connection"],
        ),
        ("GET", status_path(NS, "tj"), None, 404, JSON_ANSWER),
        ("GET", "/no/such/path", None, 404, JSON_ANSWER),
        ("GET", "/healthz", None, 200, JSON_ANSWER),
        ("GET", "/readyz", None, 200, JSON_ANSWER),
        # The pod injector answers every review, one it cannot read included.
        ("POST", "/mutate-pods", b"{}", 200, JSON_ANSWER),
    ],
)
async def test_serving_answers_carry_no_server_header(
    poster: Poster,
    devcluster: DevCluster,
    method: str,
    path: str,
    data: bytes | None,
    code: int,
    expected: list[str],
) -> None:
    devcluster.create_trainjob(NS, "tj")
    got, _, response = await poster.request(method, path, data, {"Authorization": "Bearer t"})
    assert got == code
    assert names(response.raw_headers) == sorted(expected)


PLAIN = ["Content-Length", "Content-Type", "Date"]
# The exporter compresses the page for a client that accepts gzip, a piece at a time:
# its length is not known before the last piece.
COMPRESSED = ["Content-Encoding", "Content-Type", "Date", "Transfer-Encoding"]


@pytest.mark.parametrize(
    ("path", "code", "expected"),
    [
        ("/metrics", 200, COMPRESSED),
        ("/healthz", 200, PLAIN),
        ("/readyz", 200, PLAIN),
        ("/nope", 404, PLAIN),
    ],
)
async def test_metrics_answers_carry_no_server_header(
    poster: Poster, path: str, code: int, expected: list[str]
) -> None:
    async with poster.session.get(poster.server.metrics_url + path) as response:
        assert response.status == code
        await response.read()
        assert names(response.raw_headers) == expected


async def test_an_uncompressed_page_says_its_length(poster: Poster) -> None:
    identity = {"Accept-Encoding": "identity"}
    async with poster.session.get(
        poster.server.metrics_url + "/metrics", headers=identity
    ) as response:
        body = await response.read()
        assert names(response.raw_headers) == PLAIN
        assert int(response.headers["Content-Length"]) == len(body)


@pytest.mark.parametrize(("path", "code"), [("/healthz", 200), ("/readyz", 200), ("/nope", 404)])
async def test_probe_answers_carry_no_server_header(poster: Poster, path: str, code: int) -> None:
    async with poster.session.get(poster.server.probe_url + path) as response:
        assert response.status == code
        await response.read()
        # Every probe answer closes its connection (the port's admission rule).
        assert names(response.raw_headers) == sorted([*PLAIN, "Connection"])
        assert response.headers["Connection"] == "close"

"""Generated metric names and values posted by a client, through the server, the API, the
TrainJob watch and the exporter to /metrics, with and without the series cap: the page
parses in both formats, every name it holds comes back exactly, and a name is left out
only when no format can escape it (and is then counted)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from trainjob_devcluster.harness.testing import (
    BackgroundStack,
    ServingCerts,
    exporter_on_a_port,
    status_path,
)
from trainjob_status_server.metrics.series import LAST_UPDATE, METRIC, exportable, parse_number

from .conftest import GROUP, NS

OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0"
REFUSED = "trainjob_status_metric_names_refused_total"
T0 = 1796236405.0  # 2026-12-02T18:33:25Z

# What a hostile or careless client may put in a name, beside any other character.
HOSTILE = [
    "\r", "\n", "\r\n", "\x00", '"', "\\", "\\n", "\x1b[2J", "\x1b]8;;http://x\x07", "\x7f",
    "\x85", "\u2028", "\u2029", "\t", "\x0b", "\x0c", "\x1c", "\u202e", "}", "{", ",", "=",
    " 1\n", "# EOF", "\ufeff",
]  # fmt: skip
names = st.lists(
    st.one_of(
        st.sampled_from(HOSTILE),
        st.characters(exclude_categories=("Cs",)),  # the endpoint refuses lone surrogates
    ),
    min_size=1,
    max_size=8,
).map("".join)
values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(10**6), 10**6).map(str),
    st.sampled_from(["warmup", "NaN", "1e999", " 1", "0x10", "\r1"]),
)
metric_lists = st.lists(st.tuples(names, values), min_size=1, max_size=8)


class Harness(BackgroundStack):
    """The devcluster, the status server and its exporter on a loop of their own, with an
    HTTPS session that trusts the server."""

    def __init__(self, certs: ServingCerts) -> None:
        super().__init__(certs, kube_api_timeout=5.0, kube_api_qps=10_000.0, kube_api_burst=10_000)
        self.names = itertools.count()
        self.session = self.run(self._session())

    async def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.certs.client_context())
        )

    async def post(self, name: str, trainer_status: dict[str, Any]) -> int:
        async with self.session.post(
            self.server.url + status_path(NS, name),
            data=json.dumps({"trainerStatus": trainer_status}),
            headers={"Authorization": "Bearer t"},
        ) as response:
            await response.read()
            code = response.status
        await self.server.writer.wait_idle()
        return code

    async def scrape(self, url: str, accept: str | None = None) -> str:
        headers = {"Accept": accept} if accept else {}
        async with self.session.get(url, headers=headers) as response:
            assert response.status == 200
            return await response.text()

    async def exported(self, name: str, stamp: float) -> None:
        """Until the server's own exporter holds the TrainJob's status of ``stamp``."""
        async with asyncio.timeout(10):
            while True:
                found = self.server.trainjobs.get(NS, name)
                trainer = ((found or {}).get("status") or {}).get("trainerStatus") or {}
                if trainer.get("lastUpdatedTime") == iso(stamp):
                    return
                await asyncio.sleep(0.01)

    async def gone(self, name: str) -> None:
        self.cluster.delete("trainjobs", NS, name, GROUP)
        async with asyncio.timeout(10):
            while self.server.trainjobs.get(NS, name) is not None:
                await asyncio.sleep(0.01)

    async def capped_pages(self, cap: int) -> tuple[str, str]:
        """Both formats from an exporter over the same cache with ``cap`` series at most."""
        async with exporter_on_a_port(self.server.trainjobs, cap) as target:
            url = f"http://{target}/metrics"
            return await self.scrape(url), await self.scrape(url, OPENMETRICS_ACCEPT)

    def close(self) -> None:
        self.run(self.session.close())
        super().close()


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    running = Harness(ServingCerts.create(tmp_path_factory.mktemp("tls")))
    yield running
    running.close()


def families(page: str, openmetrics: bool) -> dict[str, Any]:
    """Every family of the page; parsing the whole page is the point."""
    parse = parse_openmetrics if openmetrics else parse_text
    return {f.name: f for f in parse(page)}


def ours(parsed: dict[str, Any], trainjob: str) -> dict[str, float]:
    return {
        s.labels["name"]: s.value
        for s in parsed[METRIC].samples
        if (s.labels["namespace"], s.labels["trainjob"]) == (NS, trainjob)
    }


def refusals(parsed: dict[str, Any]) -> float:
    family = parsed[REFUSED.removesuffix("_total")]
    (value,) = (
        s.value for s in family.samples if s.name == REFUSED and s.labels["reason"] == "characters"
    )
    return float(value)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pairs=metric_lists, cap=st.integers(2, 11))
def test_any_posted_metric_names_leave_a_page_that_parses_and_round_trips(
    harness: Harness, pairs: list[tuple[str, str]], cap: int
) -> None:
    # A TrainJob of its own per example: no name limit or cap from earlier examples.
    name = f"p{next(harness.names)}"
    stamp = T0

    async def example() -> int:
        metrics_url = harness.server.metrics_url + "/metrics"
        before = families(await harness.scrape(metrics_url), openmetrics=False)
        harness.cluster.create_trainjob(NS, name)
        metrics = [{"name": n, "value": v} for n, v in pairs]
        code = await harness.post(name, {"metrics": metrics, "lastUpdatedTime": iso(stamp)})
        if code != 200:
            # The endpoint refuses what the CRD would (a name or value of 64+ UTF-16
            # units, say): nothing to export then.
            assert code == 422
            await harness.gone(name)
            return code
        await harness.exported(name, stamp)
        # The last value reported under a name is the one that counts.
        latest = dict(pairs)
        expected = {
            n: number
            for n, v in latest.items()
            if exportable(n) and (number := parse_number(v)) is not None
        }
        unexportable = {n for n in latest if not exportable(n)}
        for openmetrics in (False, True):
            page = await harness.scrape(metrics_url, OPENMETRICS_ACCEPT if openmetrics else None)
            parsed = families(page, openmetrics)
            assert ours(parsed, name) == expected
            # The server's own metrics are on the same page, and counted the refusals.
            assert "trainjob_status_requests" in parsed
            assert refusals(parsed) == refusals(before) + len(unexportable)
        # Over the cap: the page is cut between whole lines, in both formats.
        for openmetrics, page in zip((False, True), await harness.capped_pages(cap), strict=True):
            parsed = families(page, openmetrics)
            kept = ours(parsed, name)
            # The info and the last update come first.
            assert len(kept) == min(len(expected), cap - 2)
            assert kept.items() <= expected.items()
            assert [s.value for s in parsed[LAST_UPDATE].samples] == [stamp]
        await harness.gone(name)
        return code

    code = harness.run(example())
    event(f"answered {code}")
    event("some names refused" if not all(exportable(n) for n, _ in pairs) else "none refused")

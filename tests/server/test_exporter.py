"""The metrics page over real sockets: a running status server against the devcluster, the
exporter following its TrainJob cache, served on a port of its own and scraped as
Prometheus scrapes it. Series appear and vanish with the TrainJobs' status, whoever
wrote it; the cap, the counters, escaping and content negotiation hold."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import eventually
from trainjob_status.contract import GROUP
from trainjob_status_server.app import StatusServer
from trainjob_status_server.metrics.exporter import Exporter, server_registry
from trainjob_status_server.metrics.series import ESTIMATED_REMAINING, LAST_UPDATE, METRIC, PROGRESS

from .conftest import NS, Poster

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
OURS = (PROGRESS, ESTIMATED_REMAINING, LAST_UPDATE, METRIC)
T0 = dt.datetime(2026, 12, 2, 18, 33, 25, tzinfo=dt.UTC)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def stamp(second: int) -> str:
    return (T0 + dt.timedelta(seconds=second)).isoformat().replace("+00:00", "Z")


@dataclass
class Page:
    status: int
    content_type: str
    text: str
    content_encoding: str | None = None

    def families(self) -> dict[str, Any]:
        if self.content_type.startswith("application/openmetrics-text"):
            return {f.name: f for f in parse_openmetrics(self.text)}
        return {f.name: f for f in parse_text(self.text)}

    def samples(self, *names: str) -> Samples:
        """{(sample name, sorted labels): value} of the families ``names`` (ours if none)."""
        wanted = names or OURS
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in self.families().values()
            if f.name in wanted
            for s in f.samples
        }

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples(name.removesuffix("_total")).get((name, tuple(sorted(labels.items()))))


class Scraper:
    """Scrapes the exporter's page over HTTP, as Prometheus does."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.session = session

    async def scrape(self, accept: str | None = None, encoding: str = "gzip") -> Page:
        headers = {"Accept-Encoding": encoding}
        if accept is not None:
            headers["Accept"] = accept
        async with self.session.get(self.url, headers=headers) as response:
            return Page(
                response.status,
                response.headers["Content-Type"],
                await response.text(),
                response.headers.get("Content-Encoding"),
            )

    async def until(self, check: Callable[[Page], bool], accept: str | None = None) -> Page:
        """Scrape until ``check`` holds (the watch delivers within moments)."""
        async with asyncio.timeout(10):
            while True:
                page = await self.scrape(accept)
                if check(page):
                    return page
                await asyncio.sleep(0.02)


async def serve(exporter: Exporter) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/metrics", exporter.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/metrics"


ExporterFactory = Callable[..., Awaitable[tuple[Exporter, Scraper]]]


@pytest_asyncio.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest_asyncio.fixture
async def start_exporter(
    server: StatusServer, session: aiohttp.ClientSession
) -> AsyncIterator[ExporterFactory]:
    """Starts exporters over the server's TrainJob cache, each on its own port."""
    running: list[tuple[Exporter, web.AppRunner]] = []

    async def start(**options: Any) -> tuple[Exporter, Scraper]:
        exporter = Exporter(server.trainjobs, **options)
        exporter.start()
        runner, url = await serve(exporter)
        running.append((exporter, runner))
        return exporter, Scraper(url, session)

    yield start
    for exporter, runner in running:
        await runner.cleanup()
        exporter.stop()


@pytest_asyncio.fixture
async def scraper(
    server: StatusServer, session: aiohttp.ClientSession, start_exporter: ExporterFactory
) -> Scraper:
    """The server's own metrics page once app.py serves the exporter there (then it is
    the only exporter following the cache); until then one on a port of its own."""
    if isinstance(getattr(server, "exporter", None), Exporter):
        return Scraper(server.metrics_url + "/metrics", session)
    return (await start_exporter())[1]


def labels(trainjob: str, namespace: str = NS, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"namespace": namespace, "trainjob": trainjob, **more}.items()))


def has(trainjob: str, namespace: str = NS) -> Callable[[Page], bool]:
    def check(page: Page) -> bool:
        return any(key[1] == labels(trainjob, namespace) for key in page.samples(LAST_UPDATE))

    return check


def lacks(trainjob: str, namespace: str = NS) -> Callable[[Page], bool]:
    def check(page: Page) -> bool:
        return not any(
            ("trainjob", trainjob) in key[1] and ("namespace", namespace) in key[1]
            for key in page.samples()
        )

    return check


# -- series follow the status ------------------------------------------------------------------


async def test_a_posted_status_is_exported_with_its_labels_and_values(
    poster: Poster, devcluster: DevCluster, scraper: Scraper
) -> None:
    devcluster.create_trainjob(NS, "tj")
    update = {
        "progressPercentage": 42,
        "estimatedRemainingSeconds": 600,
        "metrics": [
            {"name": "loss", "value": "0.25"},
            {"name": "accuracy", "value": "0.9"},
            {"name": "phase", "value": "warmup"},
        ],
        "lastUpdatedTime": stamp(0),
    }
    assert (await poster.post("tj", {"trainerStatus": update}))[0] == 200
    page = await scraper.until(has("tj"))
    assert page.samples() == {
        (PROGRESS, labels("tj")): 0.42,
        (ESTIMATED_REMAINING, labels("tj")): 600.0,
        (LAST_UPDATE, labels("tj")): T0.timestamp(),
        (METRIC, labels("tj", name="loss")): 0.25,
        (METRIC, labels("tj", name="accuracy")): 0.9,
    }


async def test_no_series_for_trainjobs_without_trainer_status(
    poster: Poster, devcluster: DevCluster, scraper: Scraper
) -> None:
    devcluster.create_trainjob(NS, "quiet")
    devcluster.create_trainjob(NS, "tj")
    body = {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": stamp(0)}}
    assert (await poster.post("tj", body))[0] == 200
    page = await scraper.until(has("tj"))
    assert page.samples() == {
        (PROGRESS, labels("tj")): 0.01,
        (LAST_UPDATE, labels("tj")): T0.timestamp(),
    }
    # The families are still described, with no samples, as prometheus_client does.
    families = page.families()
    assert [families[name].type for name in OURS] == ["gauge"] * 4


async def test_a_deleted_trainjobs_series_are_gone_at_the_next_scrape(
    poster: Poster, devcluster: DevCluster, scraper: Scraper
) -> None:
    for name in ("gone", "stays"):
        devcluster.create_trainjob(NS, name)
        body = {
            "trainerStatus": {
                "progressPercentage": 50,
                "metrics": [{"name": "loss", "value": "1"}],
                "lastUpdatedTime": stamp(0),
            }
        }
        assert (await poster.post(name, body))[0] == 200
    await scraper.until(lambda page: has("gone")(page) and has("stays")(page))
    devcluster.delete("trainjobs", NS, "gone", GROUP)
    page = await scraper.until(lacks("gone"))
    assert page.samples() == {
        (PROGRESS, labels("stays")): 0.5,
        (LAST_UPDATE, labels("stays")): T0.timestamp(),
        (METRIC, labels("stays", name="loss")): 1.0,
    }


async def test_a_metric_or_field_no_longer_reported_is_gone(
    poster: Poster, devcluster: DevCluster, scraper: Scraper
) -> None:
    devcluster.create_trainjob(NS, "tj")
    first = {
        "progressPercentage": 10,
        "estimatedRemainingSeconds": 90,
        "metrics": [{"name": "loss", "value": "2"}, {"name": "lr", "value": "0.001"}],
        "lastUpdatedTime": stamp(0),
    }
    assert (await poster.post("tj", {"trainerStatus": first}))[0] == 200
    await scraper.until(lambda page: (METRIC, labels("tj", name="lr")) in page.samples())
    second = {
        "progressPercentage": 20,
        "metrics": [{"name": "loss", "value": "1.5"}],
        "lastUpdatedTime": stamp(10),
    }
    assert (await poster.post("tj", {"trainerStatus": second}))[0] == 200
    page = await scraper.until(lambda page: page.samples().get((PROGRESS, labels("tj"))) == 0.2)
    assert page.samples() == {
        (PROGRESS, labels("tj")): 0.2,
        (LAST_UPDATE, labels("tj")): T0.timestamp() + 10,
        (METRIC, labels("tj", name="loss")): 1.5,
    }


async def test_status_written_by_another_writer_is_exported(
    server: StatusServer, devcluster: DevCluster, scraper: Scraper
) -> None:
    devcluster.create_trainjob(NS, "tj")
    await server.kube.apply_trainjob_status(
        NS,
        "tj",
        {"progressPercentage": 77, "lastUpdatedTime": stamp(5)},
        field_manager="someone-else",
    )
    page = await scraper.until(has("tj"))
    assert page.samples() == {
        (PROGRESS, labels("tj")): 0.77,
        (LAST_UPDATE, labels("tj")): T0.timestamp() + 5,
    }


async def test_trainjobs_already_cached_when_the_exporter_starts_are_exported(
    poster: Poster, devcluster: DevCluster, server: StatusServer, start_exporter: ExporterFactory
) -> None:
    devcluster.create_trainjob("team-b", "early")
    body = {"trainerStatus": {"progressPercentage": 3, "lastUpdatedTime": stamp(0)}}
    assert (await poster.post("early", body, namespace="team-b"))[0] == 200
    async with asyncio.timeout(10):
        while server.trainjobs.get("team-b", "early") is None or "status" not in (
            server.trainjobs.get("team-b", "early") or {}
        ):
            await asyncio.sleep(0.02)
    _, scraper = await start_exporter()
    page = await scraper.scrape()
    assert page.samples() == {
        (PROGRESS, labels("early", "team-b")): 0.03,
        (LAST_UPDATE, labels("early", "team-b")): T0.timestamp(),
    }


async def test_a_stopped_exporter_exports_nothing_and_hears_nothing(
    poster: Poster, devcluster: DevCluster, start_exporter: ExporterFactory
) -> None:
    exporter, scraper = await start_exporter()
    devcluster.create_trainjob(NS, "tj")
    body = {"trainerStatus": {"progressPercentage": 3, "lastUpdatedTime": stamp(0)}}
    assert (await poster.post("tj", body))[0] == 200
    await scraper.until(has("tj"))
    exporter.stop()
    assert exporter.series_count == 0
    body = {"trainerStatus": {"progressPercentage": 4, "lastUpdatedTime": stamp(1)}}
    assert (await poster.post("tj", body))[0] == 200

    async def cached() -> bool:
        # The cache tells its listeners as it takes the event in: a listening exporter
        # would have heard it by now.
        found = poster.server.trainjobs.get(NS, "tj") or {}
        return ((found.get("status") or {}).get("trainerStatus") or {}).get(
            "progressPercentage"
        ) == 4

    await eventually(cached, "the second post's watch event in the cache", within=10, every=0.02)
    assert (await scraper.scrape()).samples() == {}
    assert exporter.series_count == 0


# -- escaping ------------------------------------------------------------------------------------

AWKWARD = [
    ('he said "hi"', "1"),
    ("C:\\temp\\", "2.5"),
    ("two\nlines", "-3e-3"),
    ("λόγος 🚀", "1e6"),
    ('\\"\n', "0"),
]


@pytest.mark.parametrize("accept", [None, PROMETHEUS_ACCEPT])
async def test_awkward_metric_names_and_values_survive_both_formats(
    poster: Poster, devcluster: DevCluster, scraper: Scraper, accept: str | None
) -> None:
    devcluster.create_trainjob(NS, "tj")
    update = {
        "metrics": [{"name": n, "value": v} for n, v in AWKWARD]
        + [{"name": "ünïcode value", "value": "½"}, {"name": 'q"uote', "value": "٣"}],
        "lastUpdatedTime": stamp(0),
    }
    assert (await poster.post("tj", {"trainerStatus": update}))[0] == 200
    page = await scraper.until(has("tj"), accept)
    assert page.samples(METRIC) == {
        (METRIC, labels("tj", name=name)): float(value) for name, value in AWKWARD
    }
    # The raw text escapes exactly backslash, double quote and newline.
    assert 'name="two\\nlines"' in page.text
    assert 'name="he said \\"hi\\""' in page.text
    assert 'name="C:\\\\temp\\\\"' in page.text
    assert 'name="λόγος 🚀"' in page.text


# -- counters --------------------------------------------------------------------------------


async def test_non_numeric_values_are_counted_once_per_change_not_per_scrape(
    poster: Poster, devcluster: DevCluster, scraper: Scraper
) -> None:
    skipped = "trainjob_status_metric_values_skipped_total"
    devcluster.create_trainjob(NS, "tj")
    before = (await scraper.scrape()).value(skipped)
    assert before is not None

    async def post(second: int, *pairs: tuple[str, str]) -> Page:
        metrics = [{"name": n, "value": v} for n, v in pairs]
        body = {"trainerStatus": {"metrics": metrics, "lastUpdatedTime": stamp(second)}}
        assert (await poster.post("tj", body))[0] == 200
        want = T0.timestamp() + second
        return await scraper.until(
            lambda page: page.samples().get((LAST_UPDATE, labels("tj"))) == want
        )

    page = await post(0, ("phase", "warmup"), ("loss", "1"), ("eta", "soon"))
    assert page.value(skipped) == before + 2
    for _ in range(3):
        assert (await scraper.scrape()).value(skipped) == before + 2
    # Another update with the same non-numeric values: nothing new to count.
    page = await post(1, ("phase", "warmup"), ("loss", "0.5"), ("eta", "soon"))
    assert page.value(skipped) == before + 2
    # One value changed, one became a number.
    page = await post(2, ("phase", "train"), ("loss", "0.4"), ("eta", "42"))
    assert page.value(skipped) == before + 3


async def test_the_cap_keeps_core_series_first_and_counts_drops_at_every_scrape(
    poster: Poster, devcluster: DevCluster, start_exporter: ExporterFactory
) -> None:
    dropped = "trainjob_status_exported_series_dropped_total"
    exporter, scraper = await start_exporter(max_series=10)
    for name in ("b-job", "a-job"):
        devcluster.create_trainjob(NS, name)
        update = {
            "progressPercentage": 50,
            "estimatedRemainingSeconds": 60,
            "metrics": [{"name": f"m{i}", "value": str(i)} for i in range(4)],
            "lastUpdatedTime": stamp(0),
        }
        assert (await poster.post(name, {"trainerStatus": update}))[0] == 200
    # 2 x (1 info + 3 core + 4 metrics) = 16 series over a cap of 10: every state and
    # core series (8), then the metrics of the first TrainJob in (namespace, name) order.
    await scraper.until(lambda page: exporter.series_count == 16)
    first = await scraper.scrape()
    second = await scraper.scrape()
    core = {
        (family, labels(job)): value
        for job in ("a-job", "b-job")
        for family, value in (
            (PROGRESS, 0.5),
            (ESTIMATED_REMAINING, 60.0),
            (LAST_UPDATE, T0.timestamp()),
        )
    }
    assert second.samples() == core | {
        (METRIC, labels("a-job", name="m0")): 0.0,
        (METRIC, labels("a-job", name="m1")): 1.0,
    }
    first_dropped, second_dropped = first.value(dropped), second.value(dropped)
    assert first_dropped is not None
    assert second_dropped == first_dropped + 6
    # The collector path keeps the same series and counts the same drops.
    registry = CollectorRegistry()
    registry.register(exporter.collector)
    assert generate_latest(registry) == exporter.trainjob_exposition()
    # Each rendering counts: the collector, the exposition above, the next scrape.
    assert (await scraper.scrape()).value(dropped) == second_dropped + 6 + 6 + 6


# -- the page --------------------------------------------------------------------------------


async def test_text_format_by_default_openmetrics_when_asked(
    poster: Poster, devcluster: DevCluster, scraper: Scraper
) -> None:
    devcluster.create_trainjob(NS, "tj")
    body = {"trainerStatus": {"progressPercentage": 9, "lastUpdatedTime": stamp(0)}}
    assert (await poster.post("tj", body))[0] == 200
    text = await scraper.until(has("tj"))
    assert text.status == 200
    assert text.content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert not text.text.endswith("# EOF\n")
    openmetrics = await scraper.scrape(PROMETHEUS_ACCEPT)
    assert openmetrics.content_type == (
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
    )
    assert openmetrics.text.endswith("# EOF\n")
    assert openmetrics.text.count("# EOF") == 1
    assert openmetrics.samples() == text.samples()
    newer = await scraper.scrape("text/plain;version=1.0.0;escaping=allow-utf-8")
    assert newer.content_type.startswith("text/plain; version=1.0.0")
    assert newer.samples() == text.samples()


async def test_compressed_when_the_scraper_accepts_it(scraper: Scraper) -> None:
    gzipped = await scraper.scrape(PROMETHEUS_ACCEPT, encoding="gzip")
    plain = await scraper.scrape(PROMETHEUS_ACCEPT, encoding="identity")
    assert (gzipped.content_encoding, plain.content_encoding) == ("gzip", None)
    assert gzipped.families().keys() == plain.families().keys()


@pytest.mark.parametrize("accept", [None, PROMETHEUS_ACCEPT])
async def test_the_page_holds_self_metrics_process_metrics_and_cache_sizes(
    devcluster: DevCluster, server: StatusServer, scraper: Scraper, accept: str | None
) -> None:
    for name in ("one", "two", "three"):
        devcluster.create_trainjob(NS, name)
    page = await scraper.until(
        lambda page: page.value("trainjob_status_cache_objects", resource="trainjobs") == 3,
        accept,
    )
    families = page.families()
    for name in (
        "trainjob_status_requests",
        "trainjob_status_request_duration_seconds",
        "trainjob_status_auth_failures",
        "trainjob_status_api_writes",
        "trainjob_status_pending_writes",
        "trainjob_status_metric_values_skipped",
        "trainjob_status_exported_series_dropped",
        "trainjob_status_metric_names_refused",
        "trainjob_status_cache_objects",
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "python_info",
        "python_gc_objects_collected",
        *OURS,
    ):
        assert name in families, name
    assert families["trainjob_status_requests"].type == "counter"
    assert families["trainjob_status_request_duration_seconds"].type == "histogram"


def test_a_server_registry_is_its_own() -> None:
    one, two = server_registry(), server_registry()
    assert one is not two
    names = {f.name for f in one.collect()}
    assert {
        "trainjob_status_requests",
        "trainjob_status_cache_objects",
        "process_cpu_seconds",
    } <= names
    assert names == {f.name for f in two.collect()}


async def test_negative_cap_is_refused(server: StatusServer) -> None:
    with pytest.raises(ValueError, match="max_series must be >= 0"):
        Exporter(server.trainjobs, max_series=-1)


# -- the name limit's default ------------------------------------------------------------


async def test_the_default_name_limit_admits_a_full_status_twice(
    poster: Poster, devcluster: DevCluster, start_exporter: ExporterFactory
) -> None:
    _, scraper = await start_exporter()
    devcluster.create_trainjob(NS, "big")
    for second, prefix in enumerate(("a", "b", "c")):
        metrics = [{"name": f"{prefix}{i}", "value": "1"} for i in range(256)]
        body = {"trainerStatus": {"metrics": metrics, "lastUpdatedTime": stamp(second)}}
        assert (await poster.post("big", body))[0] == 200
        want = T0.timestamp() + second
        page = await scraper.until(
            lambda page, want=want: page.samples().get((LAST_UPDATE, labels("big"))) == want
        )
        names = {
            dict(key[1])["name"] for key in page.samples(METRIC) if ("trainjob", "big") in key[1]
        }
        assert len(names) == (256 if prefix != "c" else 0)


async def test_a_negative_name_limit_is_refused(server: StatusServer) -> None:
    with pytest.raises(ValueError, match="max_names must be >= 0"):
        Exporter(server.trainjobs, max_names=-1)


async def test_the_collector_leaves_out_the_same_names(
    poster: Poster, devcluster: DevCluster, start_exporter: ExporterFactory
) -> None:
    exporter, scraper = await start_exporter(max_names=2)
    devcluster.create_trainjob(NS, "tj")
    for second, names in enumerate((["a", "b"], ["c", "b", "x\ry", "a"])):
        metrics = [{"name": n, "value": "1"} for n in names]
        body = {"trainerStatus": {"metrics": metrics, "lastUpdatedTime": stamp(second)}}
        assert (await poster.post("tj", body))[0] == 200
    want = T0.timestamp() + 1
    page = await scraper.until(lambda page: page.samples().get((LAST_UPDATE, labels("tj"))) == want)
    assert page.samples(METRIC) == {
        (METRIC, labels("tj", name="b")): 1.0,
        (METRIC, labels("tj", name="a")): 1.0,
    }
    registry = CollectorRegistry()
    registry.register(exporter.collector)
    assert generate_latest(registry) == exporter.trainjob_exposition()

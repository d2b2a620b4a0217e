"""What the metrics page leaves out of what clients report, through the server's own
flags and metrics port: names no exposition format can escape (the page still parses when
the series cap cuts it), and names past the per-TrainJob limit; each counted once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_status.contract import GROUP
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config
from trainjob_status_server.metrics.series import LAST_UPDATE, METRIC

from .conftest import NS, Poster, with_changes
from .test_exporter import PROMETHEUS_ACCEPT, T0, Page, Scraper, has, labels, lacks, stamp


@pytest.fixture
def flags() -> dict[str, Any]:
    """Config changes a test parametrizes."""
    return {}


@pytest.fixture
def config(config: Config, flags: dict[str, Any]) -> Config:
    return with_changes(config, **flags)


@pytest_asyncio.fixture
async def scraper(server: StatusServer) -> AsyncIterator[Scraper]:
    """The server's own metrics page: the one exporter following its cache."""
    async with aiohttp.ClientSession() as session:
        yield Scraper(server.metrics_url + "/metrics", session)


REFUSED = "trainjob_status_metric_names_refused_total"


def refused(page: Page, reason: str) -> float:
    value = page.value(REFUSED, reason=reason)
    assert value is not None
    return value


# The info, the last update and one metric fit: the cut falls inside the metric lines.
@pytest.mark.parametrize("flags", [{"max_exported_series": 3}])
@pytest.mark.parametrize("accept", [None, PROMETHEUS_ACCEPT])
async def test_a_carriage_return_in_a_name_over_the_cap_leaves_a_page_that_parses(
    poster: Poster, devcluster: DevCluster, scraper: Scraper, accept: str | None
) -> None:
    before = (await scraper.scrape(accept)).value(REFUSED, reason="characters")
    devcluster.create_trainjob(NS, "tj")
    update = {
        "metrics": [
            {"name": "x\ry", "value": "1"},
            {"name": "loss", "value": "2"},
            {"name": "\x1b]8;;http://evil\x07", "value": "3"},
            {"name": "a\u2028b", "value": "4"},
            {"name": "accuracy", "value": "5"},
        ],
        "lastUpdatedTime": stamp(0),
    }
    assert (await poster.post("tj", {"trainerStatus": update}))[0] == 200
    page = await scraper.until(has("tj"), accept)
    assert page.samples() == {
        (LAST_UPDATE, labels("tj")): T0.timestamp(),
        (METRIC, labels("tj", name="loss")): 2.0,
    }
    for raw in ("\r", "\x1b", "\u2028"):
        assert raw not in page.text
    assert before is not None
    assert refused(page, "characters") == before + 3
    # Counted once per TrainJob, not per scrape.
    assert refused(await scraper.scrape(accept), "characters") == before + 3


@pytest.mark.parametrize("flags", [{"max_metric_names_per_trainjob": 3}])
async def test_a_trainjob_exports_a_bounded_number_of_distinct_names_over_time(
    poster: Poster, devcluster: DevCluster, scraper: Scraper
) -> None:
    before = refused(await scraper.scrape(), "limit")
    devcluster.create_trainjob(NS, "churn")

    async def post(second: int, *names: str) -> Page:
        metrics = [{"name": n, "value": str(i)} for i, n in enumerate(names)]
        body = {"trainerStatus": {"metrics": metrics, "lastUpdatedTime": stamp(second)}}
        assert (await poster.post("churn", body))[0] == 200
        want = T0.timestamp() + second
        return await scraper.until(
            lambda page: page.samples().get((LAST_UPDATE, labels("churn"))) == want
        )

    def exported(page: Page) -> dict[str, float]:
        return {
            dict(key[1])["name"]: value
            for key, value in page.samples(METRIC).items()
            if ("trainjob", "churn") in key[1]
        }

    assert exported(await post(0, "step-1", "loss")) == {"step-1": 0.0, "loss": 1.0}
    # Renamed: one more name fits, the next does not.
    page = await post(1, "step-2", "loss", "step-3")
    assert exported(page) == {"step-2": 0.0, "loss": 1.0}
    assert refused(page, "limit") == before + 1
    # The same refused name again is not counted again; a new one is.
    page = await post(2, "step-3", "step-4", "loss")
    assert exported(page) == {"loss": 2.0}
    assert refused(page, "limit") == before + 2
    # Names held before are exported again whenever reported.
    page = await post(3, "step-1", "step-2", "step-5")
    assert exported(page) == {"step-1": 0.0, "step-2": 1.0}
    assert refused(page, "limit") == before + 3
    # A TrainJob deleted and made again starts afresh.
    devcluster.delete("trainjobs", NS, "churn", GROUP)
    await scraper.until(lacks("churn"))
    devcluster.create_trainjob(NS, "churn")
    assert exported(await post(4, "step-5", "step-6")) == {"step-5": 0.0, "step-6": 1.0}

"""Gauges from ingest: a scrape shows the newest accepted update of a TrainJob before its
write lands (whatever the write budget), the stored status again once the writer holds
nothing newer, and nothing of a TrainJob deleted meanwhile."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest_asyncio

from trainjob_devcluster.harness.pytest_plugin import KubeAPI, MakeStatusServer, on_both_servers
from trainjob_devcluster.harness.testing import eventually
from trainjob_status_server.app import StatusServer

from .conftest import GROUP, NS, ServingCerts, status_path

LABELS = f'namespace="{NS}",trainjob="job"'


@pytest_asyncio.fixture
async def session(certs: ServingCerts) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as client:
        yield client


async def post(
    session: aiohttp.ClientSession, server: StatusServer, progress: int, second: int
) -> None:
    body = {
        "trainerStatus": {
            "progressPercentage": progress,
            "estimatedRemainingSeconds": 600 - progress,
            "metrics": [{"name": "loss", "value": str(progress / 100)}],
            "lastUpdatedTime": f"2026-12-07T10:00:{second:02d}Z",
        }
    }
    async with session.post(
        server.url + status_path(NS, "job"),
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer test"},
    ) as answer:
        assert answer.status == 200


async def gauges(session: aiohttp.ClientSession, server: StatusServer) -> dict[str, str]:
    """The TrainJob's samples on the metrics page, by name and labels."""
    async with session.get(server.metrics_url + "/metrics") as answer:
        text = await answer.text()
    return {
        line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if 'trainjob="job"' in line
        and not line.startswith("#")
        and line.startswith(("trainjob_progress", "trainjob_estimated", "trainjob_metric"))
    }


def figures(progress: int) -> dict[str, str]:
    return {
        f"trainjob_progress_ratio{{{LABELS}}}": repr(progress / 100),
        f"trainjob_estimated_remaining_seconds{{{LABELS}}}": repr(float(600 - progress)),
        f'trainjob_metric{{name="loss",{LABELS}}}': repr(progress / 100),
    }


def stored(kube_api: KubeAPI) -> int | None:
    obj = kube_api.get("trainjobs", NS, "job", GROUP)
    assert obj is not None
    value = ((obj.get("status") or {}).get("trainerStatus") or {}).get("progressPercentage")
    return value if isinstance(value, int) else None


async def write_as_another(kube_api: KubeAPI, trainer_status: dict[str, object]) -> None:
    """A status write by another writer (the admin, a JSON merge patch), as kubectl's."""
    url = f"{kube_api.url}/apis/{GROUP}/v1alpha1/namespaces/{NS}/trainjobs/job/status"
    connector = aiohttp.TCPConnector(ssl=kube_api.client_ssl_context())
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.patch(
            url,
            data=json.dumps({"status": {"trainerStatus": trainer_status}}),
            headers={
                "Authorization": f"Bearer {kube_api.admin_token}",
                "Content-Type": "application/merge-patch+json",
            },
        ) as answer,
    ):
        assert answer.status == 200, await answer.text()


@on_both_servers
async def test_a_scrape_shows_an_accepted_update_before_its_write_lands(
    kube_api: KubeAPI, make_status_server: MakeStatusServer, session: aiohttp.ClientSession
) -> None:
    kube_api.create_trainjob(NS, "job")
    # The first write at once, the next only after ten minutes: the budget of a crowd.
    async with make_status_server(min_write_interval=600.0) as server:
        await post(session, server, 10, 1)

        async def written() -> bool:
            return stored(kube_api) == 10 and await gauges(session, server) == figures(10)

        await eventually(written, "the first update is stored and exported")
        await post(session, server, 55, 2)
        # Not written (its interval), yet the next scrape shows it.
        assert await gauges(session, server) == figures(55)
        assert stored(kube_api) == 10
        # Written by another hand meanwhile, newer: what is stored is shown again, and
        # ours, now stale, is never written.
        await write_as_another(
            kube_api,
            {
                "progressPercentage": 70,
                "estimatedRemainingSeconds": 530,
                "metrics": [{"name": "loss", "value": "0.7"}],
                "lastUpdatedTime": "2026-12-07T10:00:03Z",
            },
        )

        async def theirs() -> bool:
            return await gauges(session, server) == figures(70)

        await eventually(theirs, "the newer stored status is exported")


@on_both_servers
async def test_a_trainjob_deleted_with_an_update_held_leaves_the_page(
    kube_api: KubeAPI, make_status_server: MakeStatusServer, session: aiohttp.ClientSession
) -> None:
    kube_api.create_trainjob(NS, "job")
    async with make_status_server(min_write_interval=600.0) as server:
        await post(session, server, 10, 1)

        async def written() -> bool:
            return stored(kube_api) == 10

        await eventually(written, "the first update is stored")
        await post(session, server, 40, 2)
        assert await gauges(session, server) == figures(40)
        kube_api.delete("trainjobs", NS, "job", GROUP)

        async def gone() -> bool:
            return await gauges(session, server) == {}

        await eventually(gone, "the deleted TrainJob's series leave the page")

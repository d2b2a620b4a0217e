"""Watch over HTTP: events from a resourceVersion, selectors, bookmarks, timeouts, expiry,
dropped connections; and kubernetes-asyncio's own watch against it."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import eventually

from .conftest import TJ, Api

NS = "team-a"
GROUP = "trainer.kubeflow.org"


async def read_events(api: Api, path: str, until: int | None = None) -> list[dict[str, Any]]:
    """Read a watch stream to its end (or until ``until`` events have arrived)."""
    headers = {"Authorization": f"Bearer {api.cluster.admin_token}"}
    events: list[dict[str, Any]] = []
    async with api.session.get(api.cluster.url + path, headers=headers) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        async for line in response.content:
            events.append(json.loads(line))
            if until is not None and len(events) >= until:
                break
    return events


async def until_watched(cluster: DevCluster, plural: str, count: int, group: str = "") -> None:
    """Until ``count`` watches of ``plural`` are open in ``cluster``."""
    resource = cluster.resource(plural, group).qualified

    async def opened() -> bool:
        return len(cluster.store.watchers(resource)) >= count

    await eventually(opened, f"{count} open watches of {plural}", within=10, every=0.01)


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"].get("metadata", {}).get("name", "")) for e in events]


async def test_watch_from_list_rv_sees_added_modified_deleted_and_bookmark(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.ensure_namespace(NS)
    _, listed, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs")
    rv = listed["metadata"]["resourceVersion"]
    path = f"{TJ}/namespaces/{NS}/trainjobs?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=1"
    reader = asyncio.create_task(read_events(api, path))
    devcluster.create_trainjob(NS, "tj-watch")
    await api.call(
        "PATCH",
        f"{TJ}/namespaces/{NS}/trainjobs/tj-watch/status",
        {
            "status": {
                "trainerStatus": {
                    "progressPercentage": 5,
                    "lastUpdatedTime": "2026-12-02T18:33:25Z",
                }
            }
        },
        content_type="application/merge-patch+json",
    )
    devcluster.delete("trainjobs", NS, "tj-watch", GROUP)
    events = await reader
    assert summary(events) == [
        ("ADDED", "tj-watch"),
        ("MODIFIED", "tj-watch"),
        ("DELETED", "tj-watch"),
        ("BOOKMARK", ""),
    ]
    assert events[1]["object"]["status"]["trainerStatus"]["progressPercentage"] == 5
    assert events[-1]["object"] == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"resourceVersion": str(devcluster.store.rv)},
    }


async def test_watch_without_rv_sends_initial_state_then_end_bookmark(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "a")
    devcluster.create_trainjob(NS, "b")
    events = await read_events(
        api,
        f"{TJ}/namespaces/{NS}/trainjobs?watch=true&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=1",
    )
    assert summary(events)[:3] == [("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", "")]
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    plain = await read_events(api, f"{TJ}/namespaces/{NS}/trainjobs?watch=true&timeoutSeconds=1")
    assert summary(plain) == [("ADDED", "a"), ("ADDED", "b")]


async def test_a_name_pinned_watch_starts_from_its_object_alone(
    api: Api, devcluster: DevCluster
) -> None:
    for ns in (NS, "other"):
        for name in ("b", "a"):
            devcluster.create_trainjob(ns, name)
    events = await read_events(
        api,
        f"{TJ}/namespaces/{NS}/trainjobs?watch=true&fieldSelector=metadata.name%3Da&timeoutSeconds=1",
    )
    assert summary(events) == [("ADDED", "a")]
    assert events[0]["object"] == devcluster.store.get(f"trainjobs.{GROUP}", NS, "a")
    everywhere = await read_events(
        api, f"{TJ}/trainjobs?watch=true&fieldSelector=metadata.name%3Db&timeoutSeconds=1"
    )
    assert [(e["object"]["metadata"]["namespace"], e["type"]) for e in everywhere] == [
        ("other", "ADDED"),
        (NS, "ADDED"),
    ]
    missing = await read_events(
        api,
        f"{TJ}/namespaces/{NS}/trainjobs?watch=true&fieldSelector=metadata.name%3Dz&timeoutSeconds=1",
    )
    assert missing == []


async def test_label_and_field_selectors(api: Api, devcluster: DevCluster) -> None:
    devcluster.ensure_namespace(NS)
    rv = devcluster.store.rv
    by_label = asyncio.create_task(
        read_events(
            api,
            f"/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={rv}&labelSelector=jobset.sigs.k8s.io%2Fjobset-name%3Djob1&timeoutSeconds=1",
        )
    )
    by_name = asyncio.create_task(
        read_events(
            api,
            f"/api/v1/pods?watch=true&resourceVersion={rv}&fieldSelector=metadata.name%3Dother&timeoutSeconds=1",
        )
    )
    await until_watched(devcluster, "pods", 2)
    devcluster.create_pod(NS, "job1-node-0-0", labels={"jobset.sigs.k8s.io/jobset-name": "job1"})
    devcluster.create_pod(NS, "other")
    devcluster.set_pod_phase(NS, "job1-node-0-0", "Running")
    assert summary(await by_label) == [("ADDED", "job1-node-0-0"), ("MODIFIED", "job1-node-0-0")]
    assert summary(await by_name) == [("ADDED", "other")]


async def test_expired_resource_version_is_an_in_stream_410(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "a")
    old = devcluster.store.rv - 1
    devcluster.expire_resource_versions()
    events = await read_events(
        api, f"{TJ}/namespaces/{NS}/trainjobs?watch=true&resourceVersion={old}&timeoutSeconds=5"
    )
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({devcluster.store.rv})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


async def test_expiry_covers_the_current_version_and_a_relist_recovers(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "a")
    current = devcluster.store.rv  # what an informer that saw every change resumes from
    new = devcluster.expire_resource_versions()
    assert new == current + 1
    events = await read_events(
        api, f"{TJ}/namespaces/{NS}/trainjobs?watch=true&resourceVersion={current}"
    )
    assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
    # The relist answers the new version; a watch from it sees the next change only.
    code, listed, _ = await api.call("GET", f"{TJ}/namespaces/{NS}/trainjobs")
    assert (code, listed["metadata"]["resourceVersion"]) == (200, str(new))
    reader = asyncio.create_task(
        read_events(
            api,
            f"{TJ}/namespaces/{NS}/trainjobs?watch=true&resourceVersion={new}&timeoutSeconds=5",
            until=1,
        )
    )
    await until_watched(devcluster, "trainjobs", 1, GROUP)
    devcluster.create_trainjob(NS, "b")
    events = await asyncio.wait_for(reader, 5)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]


async def test_dropped_watch_ends_the_stream(api: Api, devcluster: DevCluster) -> None:
    devcluster.ensure_namespace(NS)
    reader = asyncio.create_task(
        read_events(api, f"{TJ}/trainjobs?watch=true&resourceVersion={devcluster.store.rv}")
    )
    await until_watched(devcluster, "trainjobs", 1, GROUP)
    assert devcluster.drop_watches("trainjobs", GROUP) == 1
    assert await asyncio.wait_for(reader, 5) == []


async def test_kubernetes_asyncio_watch(devcluster: DevCluster) -> None:
    from kubernetes_asyncio import client, config, watch

    devcluster.ensure_namespace(NS)
    api_client = await config.new_client_from_config(str(devcluster.kubeconfig_path))
    async with api_client:
        custom = client.CustomObjectsApi(api_client)
        listed = await custom.list_namespaced_custom_object(GROUP, "v1alpha1", NS, "trainjobs")
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object,
            GROUP,
            "v1alpha1",
            NS,
            "trainjobs",
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=2,
        )
        devcluster.create_trainjob(NS, "seen")
        seen = []
        async for event in stream:
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            break
        assert seen == [("ADDED", "seen")]


@pytest_asyncio.fixture
async def watching(api: Api, devcluster: DevCluster) -> AsyncIterator[asyncio.Task[Any]]:
    """A watch on the namespace's ConfigMaps, open (its answer's headers in) when given."""
    devcluster.ensure_namespace(NS)
    opened = asyncio.Event()

    async def watch() -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {api.cluster.admin_token}"}
        path = f"/api/v1/namespaces/{NS}/configmaps?watch=true&resourceVersion=0"
        async with api.session.get(api.cluster.url + path, headers=headers) as response:
            assert response.status == 200
            opened.set()
            return [json.loads(await response.content.readline())]

    task = asyncio.create_task(watch())
    await opened.wait()
    yield task
    task.cancel()


@pytest.fixture
def made_outside_the_loop(watching: asyncio.Task[Any], devcluster: DevCluster) -> str:
    """A synchronous fixture runs between the event loop's runs, as the client's ``pod``
    fixture does when it makes the TrainJob's JobSet, Job and pod."""
    devcluster.create("configmaps", {"metadata": {"name": "from-a-fixture"}}, NS)
    return "from-a-fixture"


async def test_a_change_made_outside_the_running_loop_reaches_open_watches(
    watching: asyncio.Task[Any], made_outside_the_loop: str
) -> None:
    events = await asyncio.wait_for(watching, 10)
    assert summary(events) == [("ADDED", made_outside_the_loop)]


async def test_a_change_made_on_another_thread_reaches_open_watches(
    watching: asyncio.Task[Any], devcluster: DevCluster
) -> None:
    body = {"metadata": {"name": "from-a-thread"}}
    await asyncio.to_thread(devcluster.create, "configmaps", body, NS)
    events = await asyncio.wait_for(watching, 10)
    assert summary(events) == [("ADDED", "from-a-thread")]

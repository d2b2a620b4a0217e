"""LIST at a resourceVersion: paged lists that are one snapshot, what the real server
answers when a version is gone or in the future, and the options the development
cluster refuses."""

from typing import Any

from trainjob_devcluster import DevCluster

from .conftest import TJ, Api, bad_request

NS = "rec"
LIST = f"{TJ}/namespaces/{NS}/trainjobs"
GROUP = "trainer.kubeflow.org"


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


async def test_a_list_at_a_past_version_reads_the_current_state(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob(NS, "a")
    devcluster.create_trainjob(NS, "b")
    at = devcluster.store.rv
    devcluster.delete("trainjobs", NS, "a", GROUP)
    devcluster.create_trainjob(NS, "c")
    # A real server may answer anything not older than the version: the current state.
    code, now, _ = await api.call("GET", f"{LIST}?resourceVersion={at}")
    assert (code, names(now)) == (200, ["b", "c"])
    assert now["metadata"]["resourceVersion"] == str(devcluster.store.rv)


async def test_a_future_version_is_a_504_to_retry(api: Api, devcluster: DevCluster) -> None:
    ahead = devcluster.store.rv + 5
    code, body, response = await api.call("GET", f"{LIST}?resourceVersion={ahead}")
    assert (code, body["reason"], response.headers["Retry-After"]) == (504, "Timeout", "1")
    assert body["message"] == f"Too large resource version: {ahead}, current: {devcluster.store.rv}"
    assert body["details"] == {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }


async def test_the_pages_of_a_list_are_one_snapshot(api: Api, devcluster: DevCluster) -> None:
    for name in ("a", "b", "c", "d"):
        devcluster.create_trainjob(NS, name)
    code, page, _ = await api.call("GET", f"{LIST}?limit=2")
    assert (code, names(page), page["metadata"]["remainingItemCount"]) == (200, ["a", "b"], 2)
    at = page["metadata"]["resourceVersion"]
    # Changes after the first page do not show in the next ones.
    devcluster.delete("trainjobs", NS, "c", "trainer.kubeflow.org")
    devcluster.create_trainjob(NS, "bb")
    token = page["metadata"]["continue"]
    code, rest, _ = await api.call("GET", f"{LIST}?limit=2&continue={token}")
    assert (code, names(rest), rest["metadata"]) == (
        200,
        ["c", "d"],
        {"resourceVersion": at, "continue": ""},
    )
    code, now, _ = await api.call("GET", LIST)
    assert names(now) == ["a", "b", "bb", "d"]


async def test_cluster_wide_pages_follow_namespace_order(api: Api, devcluster: DevCluster) -> None:
    # "a" < "a-b" as namespaces, though "a/..." > "a-b/..." as text.
    for namespace in ("a", "a-b"):
        for name in ("x", "y"):
            devcluster.create_trainjob(namespace, name)
    seen: list[tuple[str, str]] = []
    path = f"{TJ}/trainjobs?limit=1"
    while True:
        code, page, _ = await api.call("GET", path)
        assert code == 200
        seen += [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]]
        if not page["metadata"]["continue"]:
            break
        path = f"{TJ}/trainjobs?limit=1&continue={page['metadata']['continue']}"
    assert seen == [("a", "x"), ("a", "y"), ("a-b", "x"), ("a-b", "y")]


async def test_a_paged_list_whose_version_is_gone_gets_the_real_410(
    api: Api, devcluster: DevCluster
) -> None:
    for name in ("a", "b", "c"):
        devcluster.create_trainjob(NS, name)
    _, page, _ = await api.call("GET", f"{LIST}?limit=1")
    devcluster.expire_resource_versions()
    devcluster.delete("trainjobs", NS, "c", "trainer.kubeflow.org")
    code, body, _ = await api.call("GET", f"{LIST}?limit=1&continue={page['metadata']['continue']}")
    assert (code, body["reason"]) == (410, "Expired")
    assert body["message"] == (
        "The provided continue parameter is too old to display a consistent list result. You "
        "can start a new list without the continue parameter, or use the continue token in "
        "this response to retrieve the remainder of the results. Continuing with the provided "
        "token results in an inconsistent list - objects that were created, modified, or "
        "deleted between the time the first chunk was returned and now may show up in the list."
    )
    # Its token goes on from the same place, at the current state.
    inconsistent = body["metadata"]["continue"]
    code, rest, _ = await api.call("GET", f"{LIST}?continue={inconsistent}")
    assert (code, names(rest)) == (200, ["b"])
    assert rest["metadata"]["resourceVersion"] == str(devcluster.store.rv)


async def test_resource_version_match_and_send_initial_events_are_refused(
    api: Api, devcluster: DevCluster
) -> None:
    devcluster.ensure_namespace(NS)
    at = devcluster.store.rv
    match = (
        "the development cluster does not serve resourceVersionMatch: "
        "leave it out (a list reads the current state)"
    )
    initial = (
        "the development cluster does not serve sendInitialEvents: "
        "watch from resourceVersion 0 for the current objects first"
    )
    cases = {
        f"resourceVersion={at}&resourceVersionMatch=Exact": match,
        f"resourceVersion={at}&resourceVersionMatch=NotOlderThan": match,
        "resourceVersionMatch=": match,
        "sendInitialEvents=": initial,
        "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan": initial,
        "watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan": initial,
        "watch=true&resourceVersion=0&resourceVersionMatch=NotOlderThan": match,
    }
    for query, message in cases.items():
        code, body, _ = await api.call("GET", f"{LIST}?{query}")
        assert (code, body) == (
            400,
            bad_request(message),
        ), query


async def test_a_continue_token_or_limit_that_is_not_one_is_a_400(api: Api) -> None:
    code, body, _ = await api.call("GET", f"{LIST}?continue=bm90LWEtdG9rZW4")
    assert (code, body["reason"], body["message"]) == (
        400,
        "BadRequest",
        "invalid continue token: continue key is not valid: invalid character 'n' looking for "
        "beginning of value",
    )
    code, body, _ = await api.call("GET", f"{LIST}?limit=ten")
    assert (code, body["reason"], body["message"]) == (
        400,
        "BadRequest",
        'strconv.ParseInt: parsing "ten": invalid syntax',
    )


async def test_a_name_pinned_list_finds_its_object_and_nothing_else(
    api: Api, devcluster: DevCluster
) -> None:
    for ns in (NS, "other"):
        for name in ("b", "a", "c"):
            devcluster.create_trainjob(ns, name)
    devcluster.delete("trainjobs", NS, "b", GROUP)
    cases = [
        (f"{LIST}?fieldSelector=metadata.name%3Da", [(NS, "a")]),
        (f"{LIST}?fieldSelector=metadata.name%3D%3Da", [(NS, "a")]),
        (f"{LIST}?fieldSelector=metadata.name%3Db", []),
        (f"{LIST}?fieldSelector=metadata.name%3Dnone", []),
        (f"{LIST}?fieldSelector=metadata.name%3Da,metadata.name%3Dc", []),
        (f"{LIST}?fieldSelector=metadata.name%3Da,metadata.namespace%3D{NS}", [(NS, "a")]),
        (f"{LIST}?fieldSelector=metadata.name%3Da,metadata.namespace%3Dother", []),
        (f"{LIST}?fieldSelector=metadata.name!%3Da", [(NS, "c")]),
        (f"{TJ}/trainjobs?fieldSelector=metadata.name%3Da", [("other", "a"), (NS, "a")]),
        (f"{TJ}/trainjobs?fieldSelector=metadata.name%3Db", [("other", "b")]),
    ]
    for path, expected in cases:
        code, body, _ = await api.call("GET", path)
        found = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]]
        assert (code, found) == (200, expected), path
    code, body, _ = await api.call("GET", f"{TJ}/trainjobs?fieldSelector=metadata.name%3Da&limit=1")
    assert (code, names(body), body["metadata"]["remainingItemCount"]) == (200, ["a"], 1)
    code, rest, _ = await api.call(
        "GET",
        f"{TJ}/trainjobs?fieldSelector=metadata.name%3Da&continue={body['metadata']['continue']}",
    )
    assert body["items"][0]["metadata"]["namespace"] == "other"
    assert (code, [i["metadata"]["namespace"] for i in rest["items"]]) == (200, [NS])

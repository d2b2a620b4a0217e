import pytest

from trainjob_devcluster.common.status import ApiError
from trainjob_devcluster.storage.selectors import (
    labels_match,
    parse_field_selector,
    parse_label_selector,
)


def obj(labels: dict[str, str], name: str = "a") -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {}, True),
        ("app=x", {"app": "x"}, True),
        ("app==x", {"app": "y"}, False),
        ("app!=x", {}, True),
        ("app!=x", {"app": "x"}, False),
        ("app in (x, y)", {"app": "y"}, True),
        ("app notin (x,y)", {"app": "z"}, True),
        ("app notin (x,y)", {"app": "x"}, False),
        ("app", {"app": ""}, True),
        ("!app", {"app": ""}, False),
        ("!app", {"other": "1"}, True),
        ("a=1,b in (2,3),!c", {"a": "1", "b": "3"}, True),
        ("a=1,b in (2,3),!c", {"a": "1", "b": "3", "c": "x"}, False),
        ("jobset.sigs.k8s.io/jobset-name=job1", {"jobset.sigs.k8s.io/jobset-name": "job1"}, True),
        ("  ", {}, True),
        # An empty value: after = or !=, or a slot left empty in a set.
        ("app=", {"app": ""}, True),
        ("app=", {"app": "x"}, False),
        ("app!=,b", {"b": "1"}, True),
        ("app in (x,)", {"app": ""}, True),
        ("app in (,x)", {"app": ""}, True),
        ("app in (x)", {"app": ""}, False),
        ("app notin (x,)", {"app": ""}, False),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert labels_match(parse_label_selector(selector), obj(labels)) is expected


@pytest.mark.parametrize(
    "selector",
    ["a in (x", "a in ()", "a=b=c", "a=1,,b", "a=1,", "!", "a in x", "a notin (x))", "(a)"],
)
def test_bad_label_selector_is_400(selector: str) -> None:
    with pytest.raises(ApiError) as err:
        parse_label_selector(selector)
    assert err.value.code == 400
    assert err.value.message == (
        f'unable to parse requirement: invalid label selector: "{selector}"'
    )


def test_field_selectors() -> None:
    pick = parse_field_selector("metadata.name=a,status.phase!=Running")
    assert pick({"metadata": {"name": "a"}, "status": {"phase": "Pending"}})
    assert not pick({"metadata": {"name": "a"}, "status": {"phase": "Running"}})
    assert not pick({"metadata": {"name": "b"}})
    assert parse_field_selector(None)({})
    # Commas separate terms wherever they stand; empty terms are skipped.
    assert parse_field_selector(" metadata.name=a , ,")({"metadata": {"name": "a"}})
    events = parse_field_selector("involvedObject.kind=TrainJob,involvedObject.name=job1")
    assert events({"involvedObject": {"kind": "TrainJob", "name": "job1"}})

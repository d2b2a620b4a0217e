"""The contract's names and limits are the TrainJob CRD's (the one the devcluster serves,
kept identical to the Kubeflow Trainer's ``status.trainerStatus``)."""

from __future__ import annotations

from typing import Any

from trainjob_devcluster.common.resources import load_crd
from trainjob_status import contract


def test_the_contract_names_and_bounds_are_the_crds() -> None:
    crd = load_crd("trainjobs.yaml")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{contract.RESOURCE}.{contract.GROUP}"
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"]) == (
        contract.GROUP,
        contract.RESOURCE,
        contract.KIND,
    )
    (version,) = spec["versions"]
    assert version["name"] == contract.VERSION
    assert "status" in version["subresources"]
    status: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    trainer = status["properties"]["trainerStatus"]["properties"]
    metrics = trainer["metrics"]
    assert metrics["maxItems"] == contract.MAX_METRICS
    for field in ("name", "value"):
        bounds = metrics["items"]["properties"][field]
        assert (bounds["minLength"], bounds["maxLength"]) == (1, contract.MAX_METRIC_CHARS)
    progress = trainer["progressPercentage"]
    assert (progress["format"], progress["minimum"], progress["maximum"]) == (
        "int32",
        0,
        contract.MAX_PROGRESS_PERCENT,
    )
    assert trainer["estimatedRemainingSeconds"]["format"] == "int32"

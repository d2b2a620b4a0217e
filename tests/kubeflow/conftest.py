"""Kubeflow Trainer's own programs on a real control plane of this module's own (its
token issuer is its own URL, which the Trainer's status server discovers through). Skipped
where the Trainer's build (``make trainer-assets``), the control plane's
(``make kube-assets``) or private mount namespaces are missing, except under CI
(TRAINJOB_STATUS_CI=1), where each of those fails instead."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from trainjob_devcluster.harness.controlplane import AssetsMissing, ControlPlane, find_assets
from trainjob_devcluster.harness.kubeflow_trainer import (
    TrainerAssetsMissing,
    find_trainer_assets,
    private_mounts_usable,
)
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import ServingCerts

from .rig import Kubeflow

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def _missing(why: str) -> None:
    if os.environ.get("TRAINJOB_STATUS_CI") == "1":
        pytest.fail(why)
    pytest.skip(why)


def _required(find: Callable[[], T]) -> T:
    try:
        return find()
    except (AssetsMissing, TrainerAssetsMissing) as missing:
        _missing(str(missing))
        raise


@pytest.fixture(scope="module")
def kubeflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubeflow]:
    trainer = _required(lambda: find_trainer_assets(ROOT / "tools" / "trainer" / "go.mod"))
    kube = _required(find_assets)
    why = private_mounts_usable()
    if why:
        _missing(why)
    with ControlPlane(kube, issuer=None) as plane:
        kubeflow = Kubeflow(RealCluster(plane), trainer, tmp_path_factory.mktemp("kubeflow"))
        kubeflow.install()
        yield kubeflow


@pytest.fixture
def certs(tmp_path: Path) -> ServingCerts:
    return ServingCerts.create(tmp_path)

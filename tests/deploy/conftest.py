"""The ``kubectl`` fixture of the tests that install on the real control plane."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from trainjob_devcluster.harness.realcluster import RealCluster

from .assets import crd_files
from .cluster import Kubectl


@pytest.fixture
def kubectl(real_cluster: RealCluster) -> Iterator[Kubectl]:
    """kubectl on a control plane holding the components' CRDs and a ClusterRole of
    another's."""
    run = Kubectl(real_cluster)
    for crd in crd_files():
        run("apply", "--server-side", "-f", str(crd))
    for crd in crd_files():
        name = yaml.safe_load(crd.read_text())["metadata"]["name"]
        run("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    run("create", "clusterrole", "bystander", "--verb=get", "--resource=pods")
    yield run
    run("delete", "clusterrole", "bystander", "--ignore-not-found")

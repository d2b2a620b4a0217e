"""The ``kubectl`` fixture of the tests that install on the real control plane."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status_server.progress import resource

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
    # What a failed test may leave of components/progress-api that the suite's clean-up
    # cannot take: an APIService without its server breaks the discovery the clean-up
    # reads, and the clean-up leaves kube-system alone.
    run("delete", "apiservice", resource.APISERVICE, "--ignore-not-found")
    run(
        "delete",
        "rolebinding",
        "-n",
        "kube-system",
        "trainjob-status-authentication-reader",
        "--ignore-not-found",
    )

"""The real control plane fixture: how it finds its binaries, the flags it starts them
with, what it serves once ready, and that it leaves nothing behind on any exit path."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainjob_devcluster.common.status import ApiError
from trainjob_devcluster.harness.controlplane import (
    FRONT_PROXY_NAME,
    PORT_ATTEMPTS,
    ApiserverFiles,
    AssetsMissing,
    ControlPlane,
    PortTaken,
    apiserver_args,
    etcd_args,
    find_assets,
    port_taken,
)
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import free_port
from trainjob_status import contract

RBAC = "rbac.authorization.k8s.io"
GO_MOD = Path(__file__).parents[2] / "tools" / "kube" / "go.mod"


def pinned(module: str) -> str:
    for line in GO_MOD.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == module and parts[1].startswith("v"):
            return parts[1]
    raise AssertionError(f"{module} is not pinned in {GO_MOD}")


def test_assets_unset_says_how_to_build_them() -> None:
    with pytest.raises(AssetsMissing) as caught:
        find_assets({})
    assert (
        str(caught.value) == "KUBEBUILDER_ASSETS is not set (make kube-assets builds the binaries)"
    )


def test_assets_folder_without_the_binaries_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    with pytest.raises(AssetsMissing) as caught:
        find_assets({"KUBEBUILDER_ASSETS": str(tmp_path)})
    assert str(caught.value) == (
        f"KUBEBUILDER_ASSETS={tmp_path} has no executable kube-apiserver"
        " (make kube-assets builds them)"
    )
    (tmp_path / "kube-apiserver").write_text("#!/bin/sh\n")
    (tmp_path / "kube-apiserver").chmod(0o755)
    assert find_assets({"KUBEBUILDER_ASSETS": str(tmp_path)}) == tmp_path


def test_apiserver_flags_are_rbac_with_our_issuer_and_static_admin(tmp_path: Path) -> None:
    files = ApiserverFiles(*(tmp_path / name for name in "abcdefghi"))
    args = apiserver_args(files, 6443, 2379, "https://issuer.example")
    assert "--authorization-mode=Node,RBAC" in args
    assert "--service-account-issuer=https://issuer.example" in args
    assert f"--service-account-signing-key-file={tmp_path / 'f'}" in args
    assert f"--token-auth-file={tmp_path / 'd'}" in args
    assert "--etcd-servers=http://127.0.0.1:2379" in args
    assert "--bind-address=127.0.0.1" in args
    assert "--service-account-jwks-uri=https://127.0.0.1:6443/openid/v1/jwks" in args


def test_apiserver_flags_turn_the_aggregation_layer_on(tmp_path: Path) -> None:
    """A front proxy of its own CA, and APIServices reached at their endpoints."""
    files = ApiserverFiles(*(tmp_path / name for name in "abcdefghi"))
    args = apiserver_args(files, 6443, 2379, "https://issuer.example")
    assert f"--requestheader-client-ca-file={tmp_path / 'g'}" in args
    assert f"--proxy-client-cert-file={tmp_path / 'h'}" in args
    assert f"--proxy-client-key-file={tmp_path / 'i'}" in args
    assert f"--requestheader-allowed-names={FRONT_PROXY_NAME}" in args
    assert "--requestheader-username-headers=X-Remote-User" in args
    assert "--enable-aggregator-routing=true" in args


def test_etcd_listens_on_loopback_only(tmp_path: Path) -> None:
    args = etcd_args(tmp_path, 2379, 2380)
    urls = [a.split("=", 1)[1] for a in args if "-urls=" in a]
    assert len(urls) == 4
    assert all(u.startswith("http://127.0.0.1:") for u in urls)


def test_the_real_server_is_the_pinned_release_with_trainjobs(real_cluster: RealCluster) -> None:
    code, version = real_cluster.plane.request("GET", "/version")
    assert code == 200
    assert version["gitVersion"] == pinned("k8s.io/kubernetes")
    real_cluster.create_trainjob("team-a", "tj")
    found = real_cluster.get(contract.RESOURCE, "team-a", "tj", contract.GROUP)
    assert found is not None
    assert found["spec"]["runtimeRef"]["name"] == "torch-distributed"


def test_kubectl_works_with_the_admin_kubeconfig(real_cluster: RealCluster) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    real_cluster.create_trainjob("team-a", "tj")
    out = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(real_cluster.kubeconfig_path),
            "get",
            "trainjobs",
            "-A",
            "-o",
            "name",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout == "trainjob.trainer.kubeflow.org/tj\n"


def test_reset_removes_what_tests_made_and_keeps_the_builtins(real_cluster: RealCluster) -> None:
    real_cluster.create_trainjob("team-a", "tj")
    real_cluster.create_pod("team-a", "p", service_account="trainer")
    real_cluster.create(
        "clusterroles", {"metadata": {"name": "made-by-a-test"}, "rules": []}, group=RBAC
    )
    # Kinds the handle has no name for are found through discovery.
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    deployments = "/apis/apps/v1/namespaces/team-a/deployments"
    assert real_cluster.plane.request("POST", deployments, deployment)[0] == 201
    priority = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "made-by-a-test"},
        "value": 10,
    }
    priorities = "/apis/scheduling.k8s.io/v1/priorityclasses"
    assert real_cluster.plane.request("POST", priorities, priority)[0] == 201
    real_cluster.reset()
    assert real_cluster.plane.request("GET", f"{deployments}/d")[0] == 404
    assert real_cluster.plane.request("GET", f"{priorities}/made-by-a-test")[0] == 404
    assert real_cluster.plane.request("GET", f"{priorities}/system-cluster-critical")[0] == 200
    assert real_cluster.get("namespaces", "", "team-a") is None
    assert real_cluster.get("clusterroles", "", "made-by-a-test", RBAC) is None
    assert real_cluster.get("clusterroles", "", "cluster-admin", RBAC) is not None
    assert real_cluster.get("services", "default", "kubernetes") is not None
    # A namespace of the same name can be made again at once (none is left terminating).
    real_cluster.create_trainjob("team-a", "tj")
    assert (
        real_cluster.list(contract.RESOURCE, "team-a", contract.GROUP)[0]["metadata"]["name"]
        == "tj"
    )


def test_reset_removes_jobs_whose_default_is_to_orphan(real_cluster: RealCluster) -> None:
    # A Job deleted with its default propagation gets the `orphan` finalizer, which only
    # the garbage collector (not running here) would clear: reset deletes in the
    # background, so the next test's Job of the same name is new and owned afresh.
    real_cluster.create_trainjob("team-a", "tj")
    first = real_cluster.create_trainjob_pod("team-a", "tj", "tj-node-0-0")
    real_cluster.reset()
    assert real_cluster.get("jobs", "team-a", "tj-node-0", "batch") is None
    assert real_cluster.get("jobsets", "team-a", "tj", "jobset.x-k8s.io") is None
    trainjob = real_cluster.create_trainjob("team-a", "tj")
    second = real_cluster.create_trainjob_pod("team-a", "tj", "tj-node-0-0")
    job = real_cluster.get("jobs", "team-a", "tj-node-0", "batch")
    jobset = real_cluster.get("jobsets", "team-a", "tj", "jobset.x-k8s.io")
    assert job is not None, "job"
    assert jobset is not None, "jobset"
    assert second["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert job["metadata"]["ownerReferences"][0]["uid"] == jobset["metadata"]["uid"]
    assert jobset["metadata"]["ownerReferences"][0]["uid"] == trainjob["metadata"]["uid"]
    assert second["metadata"]["uid"] != first["metadata"]["uid"]


def test_a_create_the_server_refuses_raises_its_status(real_cluster: RealCluster) -> None:
    real_cluster.create_trainjob("team-a", "tj")
    with pytest.raises(ApiError) as caught:
        real_cluster.create_trainjob("team-a", "tj")
    assert (caught.value.code, caught.value.reason) == (409, "AlreadyExists")
    assert caught.value.message == 'trainjobs.trainer.kubeflow.org "tj" already exists'


def fake_assets(folder: Path, apiserver_script: str) -> Path:
    """The real etcd beside a kube-apiserver stand-in script."""
    real = os.environ.get("KUBEBUILDER_ASSETS", "")
    if not os.access(Path(real) / "etcd", os.X_OK):
        pytest.skip("KUBEBUILDER_ASSETS has no etcd")
    (folder / "etcd").symlink_to(Path(real) / "etcd")
    script = folder / "kube-apiserver"
    script.write_text(apiserver_script)
    script.chmod(0o755)
    return folder


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A child not yet reaped is a zombie: it runs no more.
    status = Path(f"/proc/{pid}/stat").read_text().split()[2]
    return status == "Z"


def default_ctrl_c() -> None:
    """Run in a child before its exec: Ctrl-C's default action, as in a terminal, even when
    this test run ignores SIGINT (a background job of a non-interactive shell does, and an
    ignored signal stays ignored across exec: Python would never raise KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_failed_start_stops_etcd_and_removes_its_files(tmp_path: Path) -> None:
    assets = fake_assets(tmp_path, "#!/bin/sh\necho 'bad flag' >&2\nexit 3\n")
    plane = ControlPlane(assets)
    with pytest.raises(RuntimeError) as caught:
        plane.start()
    assert str(caught.value).startswith("kube-apiserver exited with 3 during start:\n")
    assert "bad flag" in str(caught.value)
    assert not plane.workdir.exists()
    assert plane._processes == []


@pytest.mark.parametrize(
    "signal_number", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"]
)
def test_an_interrupted_start_leaves_no_process(tmp_path: Path, signal_number: int) -> None:
    """Ctrl-C during the start stops both children and removes the folder; a SIGKILLed
    test run runs no finalizer, and the kernel stops the children all the same."""
    assets = fake_assets(tmp_path, "#!/bin/sh\nexec sleep 600\n")
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from trainjob_devcluster.harness.controlplane import ControlPlane\n"
        "plane = ControlPlane(Path(sys.argv[1]))\n"
        "print(plane.workdir, flush=True)\n"
        "plane.start()\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", program, str(assets)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=default_ctrl_c,
    )
    assert parent.stdout is not None
    workdir = Path(parent.stdout.readline().strip())
    try:
        children: list[int] = []
        deadline = time.monotonic() + 60
        while len(children) < 2 and time.monotonic() < deadline:
            found = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
            children = [int(pid) for pid in found.read_text().split()]
            time.sleep(0.05)
        assert len(children) == 2, children
        parent.send_signal(signal_number)
        # Python ends on an uncaught KeyboardInterrupt by SIGINT, after its finalizers.
        assert parent.wait(30) == -signal_number
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 20
    while not all(gone(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(pid) for pid in children)
    if signal_number == signal.SIGINT:
        assert not workdir.exists()
    shutil.rmtree(workdir, ignore_errors=True)


def test_a_port_taken_between_finding_and_binding_is_found_again(
    control_plane: RealCluster,
) -> None:
    """etcd's client port, found free, is taken by another process before etcd binds it:
    the start is made again on new ports."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        given = [taken]

        def ports() -> int:
            return given.pop(0) if given else free_port()

        with ControlPlane(find_assets(), ports=ports) as plane:
            assert given == []
            assert plane.request("GET", "/readyz") == (200, "ok")
            assert not plane.url.endswith(f":{taken}")


def test_a_port_taken_at_every_attempt_fails_after_the_last(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    fake = tmp_path / "assets"
    fake.mkdir()
    for name in ("etcd", "kube-apiserver"):
        script = fake / name
        script.write_text(
            f"#!/bin/sh\necho {name} >> {runs}\n"
            "echo 'listen tcp 127.0.0.1:1: bind: address already in use' >&2\nexit 1\n"
        )
        script.chmod(0o755)
    plane = ControlPlane(fake)
    with pytest.raises(PortTaken) as caught:
        plane.start()
    assert str(caught.value).startswith("etcd exited with 1 during start:\n")
    assert runs.read_text().split().count("etcd") == PORT_ATTEMPTS
    assert not plane.workdir.exists()


@pytest.mark.parametrize(
    ("log", "taken"),
    [
        ('{"level":"fatal","msg":"listen tcp 127.0.0.1:2379: bind: address already in use"}', True),
        (
            "E1205 failed to listen on 127.0.0.1:6443: listen tcp 127.0.0.1:6443: bind: address already in use",
            True,
        ),
        ("Error: unknown flag: --bad", False),
        ("", False),
    ],
)
def test_a_taken_port_is_told_by_the_log(log: str, taken: bool) -> None:
    assert port_taken(log) is taken

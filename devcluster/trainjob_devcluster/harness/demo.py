"""``trainjob-devcluster demo``: the whole path on one machine, in about 30 seconds.

A development cluster, a TrainJob and its pod, a CA and serving certificate, the server
with real token verification, and a simulated training loop that reports through the
in-pod client with a token minted for that pod. The progress bar shows what the API
server holds for the TrainJob (read back through the Kubernetes API), not what was sent.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from trainjob_status.contract import (
    CA_CERT_ENV,
    TOKEN_ENV,
    URL_ENV,
    audience,
    status_path,
)
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth.verifier import AuthSettings, TokenAuthenticator
from trainjob_status_server.config import Config
from trainjob_status_server.kube.resources import TRAINJOBS

from .cluster import DevCluster
from .kubeconfig import write_private
from .pki import CertificateAuthority

NAMESPACE = "demo"
TRAINJOB = "mnist"
POD = "mnist-node-0-0"


@dataclass(frozen=True)
class DemoOptions:
    duration: float = 30.0
    report_interval: float = 2.0
    keep: bool = False
    workdir: Path | None = None


def exports(url: str, ca: Path, token: Path) -> list[str]:
    """The shell lines that give another terminal what the demo's pod has."""
    values = ((URL_ENV, url), (CA_CERT_ENV, str(ca)), (TOKEN_ENV, str(token)))
    return [f"export {name}={shlex.quote(value)}" for name, value in values]


def kubectl_command(kubeconfig: Path) -> list[str]:
    """kubectl, pointed at the demo's cluster, reading the TrainJob's progress."""
    return [
        "kubectl", "--kubeconfig", str(kubeconfig), "get", "trainjob", TRAINJOB,
        "-n", NAMESPACE, "-o", "jsonpath={.status.trainerStatus.progressPercentage}",
    ]  # fmt: skip


def command(name: str, bin_dir: Path, path: str | None) -> str:
    """How to call one of our commands from the user's shell: its bare name where
    ``path`` (the shell's PATH) finds this installation's, else its full path."""
    own = bin_dir / name
    found = shutil.which(name, path=path)
    if found is not None and Path(found).resolve() == own.resolve():
        return name
    return str(own)


def activation(bin_dir: Path, path: str | None, cwd: Path) -> str | None:
    """The shell command that puts our commands on PATH, when they are not on it and the
    virtualenv has an activate script; None otherwise."""
    activate = bin_dir / "activate"
    if command("trainjob-status", bin_dir, path) == "trainjob-status" or not activate.is_file():
        return None
    shown = os.path.relpath(activate, cwd) if activate.is_relative_to(cwd) else str(activate)
    return f"source {shlex.quote(shown)}"


def report_command(bin_dir: Path, path: str | None) -> list[str]:
    """A report from the user's shell, with the variables printed above."""
    return [command("trainjob-status", bin_dir, path), "report", "--progress", "50"]


def watch_command(kubeconfig: Path, bin_dir: Path, path: str | None) -> list[str]:
    """The plugin's live view of the TrainJob: ``kubectl trainjob`` where kubectl and the
    plugin are on PATH, else the plugin's own command by its full path."""
    plugin = command("kubectl-trainjob", bin_dir, path)
    head = ["kubectl", "trainjob"]
    if plugin != "kubectl-trainjob" or shutil.which("kubectl", path=path) is None:
        head = [plugin]
    return [*head, "progress", "--kubeconfig", str(kubeconfig), "-n", NAMESPACE, TRAINJOB, "-w"]


def lifetime_note(keep: bool) -> str:
    """How long what the demo printed stays usable: the cluster, the server and the
    files live as long as the demo does."""
    if keep:
        return "(until you stop the demo with Ctrl-C)"
    return (
        "(only while the demo runs: add --keep, or run `make demo ARGS=--keep`, to keep it"
        " running afterwards)"
    )


def train(stop_at: float, url: str, token: Path, ca: Path, interval: float) -> None:
    """A pretend training loop: 1,000 steps, loss falling, reported at every step."""
    from trainjob_status import StatusReporter

    steps = 1000
    started = time.monotonic()
    with StatusReporter(url, str(token), str(ca), min_interval=interval) as reporter:
        for step in range(1, steps + 1):
            remaining = (stop_at - started) * (steps - step) / steps
            reporter.report(
                progress_percent=100 * step // steps,
                estimated_remaining_seconds=int(remaining),
                metrics={
                    "loss": 2.3 * math.exp(-step / 250) + 0.05,
                    "accuracy": min(0.99, step / steps),
                },
                step=step,
                epoch=step // 250,
            )
            time.sleep(max(0.0, started + (stop_at - started) * step / steps - time.monotonic()))
        reporter.flush(timeout=10)


async def run_demo(options: DemoOptions) -> int:
    """The demo; a temporary folder of its own (a private key and a token in it) is
    removed however it ends: done, an error, Ctrl-C or SIGTERM, with --keep too."""
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="trainjob-status-demo-"))
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        # SIGTERM ends the demo as Ctrl-C does, through the cleanup below.
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        return await _run(options, workdir)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        if options.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


async def _run(options: DemoOptions, workdir: Path) -> int:
    console = Console(stderr=True)
    bin_dir, path = Path(sys.executable).parent, os.environ.get("PATH")
    async with DevCluster(workdir=workdir / "devcluster") as cluster:
        cluster.ensure_namespace(NAMESPACE)
        cluster.create_trainjob(NAMESPACE, TRAINJOB)
        cluster.create_trainjob_pod(NAMESPACE, TRAINJOB, POD)
        ca = CertificateAuthority(common_name="trainjob-status demo CA")
        cert, key = ca.issue_server_cert(["localhost"], ["127.0.0.1"])
        (workdir / "tls.crt").write_bytes(cert)
        write_private(workdir / "tls.key", key)
        (workdir / "ca.crt").write_bytes(ca.certificate.public_bytes(Encoding.PEM))
        config = Config(
            host="127.0.0.1",
            port=0,
            metrics_port=0,
            probe_port=0,
            webhook_port=0,
            tls_cert_file=workdir / "tls.crt",
            tls_key_file=workdir / "tls.key",
            kubeconfig=cluster.kubeconfig_path,
            log_level="warning",
        )
        authenticator = TokenAuthenticator(AuthSettings(issuer=cluster.issuer))
        async with StatusServer(config, authenticator) as server:
            await server.trainjobs.synced.wait()
            url = server.url + status_path(NAMESPACE, TRAINJOB)
            token = cluster.request_token(
                NAMESPACE, "default", [audience(NAMESPACE, TRAINJOB)], pod=POD
            )
            write_private(workdir / "token", token.encode())
            console.print(
                f"[bold]devcluster[/] {cluster.url}  kubeconfig {cluster.kubeconfig_path}"
            )
            console.print(f"[bold]server[/]     {url}")
            console.print(f"[bold]metrics[/]    {server.metrics_url}/metrics")
            activate = activation(bin_dir, path, Path.cwd())
            if activate is not None:
                console.print("\nOur commands are not on your PATH; in a shell of your own run")
                _plain(console, activate)
                console.print("or call them by their full paths, as below.")
            console.print(
                "\nThe pod's environment, to report from a shell of your own "
                + lifetime_note(options.keep)
                + ":"
            )
            for line in exports(url, workdir / "ca.crt", workdir / "token"):
                _plain(console, line)
            _plain(console, shlex.join(report_command(bin_dir, path)))
            console.print(f"\nWatch it live from another shell {lifetime_note(options.keep)}:")
            _plain(console, shlex.join(watch_command(cluster.kubeconfig_path, bin_dir, path)))
            stop_at = time.monotonic() + options.duration
            trainer = threading.Thread(
                target=train,
                args=(stop_at, url, workdir / "token", workdir / "ca.crt", options.report_interval),
                daemon=True,
            )
            trainer.start()
            final = await _show_progress(server, console, trainer)
            console.print("\n[bold]status.trainerStatus[/] as the API server holds it:")
            console.print_json(json.dumps(final))
            await _kubectl_hint(console, cluster, options.keep)
            if options.keep:
                console.print("Serving until Ctrl-C (--keep).")
                await asyncio.Event().wait()
    return 0 if final.get("progressPercentage") == 100 else 1


async def _show_progress(
    server: StatusServer, console: Console, trainer: threading.Thread
) -> dict[str, Any]:
    progress = Progress(
        TextColumn(f"{NAMESPACE}/{TRAINJOB}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("ETA {task.fields[eta]}"),
        TextColumn("loss {task.fields[loss]}"),
        TimeElapsedColumn(),
        console=console,
    )
    held: dict[str, Any] = {}
    with progress:
        task = progress.add_task("train", total=100, eta="-", loss="-")
        deadline = None
        while True:
            obj = await server.kube.get(TRAINJOBS, NAMESPACE, TRAINJOB)
            held = ((obj or {}).get("status") or {}).get("trainerStatus") or {}
            metrics = {m["name"]: m["value"] for m in held.get("metrics") or []}
            progress.update(
                task,
                completed=held.get("progressPercentage", 0),
                eta=f"{held['estimatedRemainingSeconds']}s"
                if "estimatedRemainingSeconds" in held
                else "-",
                loss=metrics.get("loss", "-"),
            )
            if held.get("progressPercentage") == 100:
                break
            if not trainer.is_alive():
                deadline = deadline or time.monotonic() + 15
                if time.monotonic() > deadline:
                    break
            await asyncio.sleep(0.5)
    return held


def _plain(console: Console, line: str) -> None:
    """``line`` exactly as given: one line however narrow the terminal (to copy and
    paste), no markup or highlighting."""
    console.print(line, soft_wrap=True, markup=False, highlight=False, overflow="ignore")


async def _kubectl_hint(console: Console, cluster: DevCluster, keep: bool) -> None:
    command = kubectl_command(cluster.kubeconfig_path)
    console.print(f"\nLook at it with kubectl {lifetime_note(keep)}:")
    _plain(console, shlex.join(command))
    if shutil.which("kubectl"):
        # Not subprocess.run: the cluster answering kubectl runs on this event loop.
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        console.print(f"  -> {(out or err).decode().strip()}")

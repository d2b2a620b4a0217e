"""The client inside real training loops: steps/s and exit time per scenario.

Endpoints, all on this machine: ``healthy`` (our server on a devcluster, TLS, direct
writes), ``slow`` (answers every post after 2 s) and ``hung`` (accepts connections and
never answers), and for the ``client`` rows ``drip`` (accepts connections and drips its
TLS handshake, a byte every half second, never finishing it). Reporting: none, transformers' built-in ``KubeflowCallback`` (switched on
by the pod's variables alone), ours (``attach(trainer)``), and ours in Lightning; plus
``client`` rows, the reporter alone (no framework, no torch): report per step, train-end
flush, ``close()``, exit.

Each scenario runs in its own process (its exit hooks and environment are its own). A
row gives the steps timed, steps/s over them (the first two left out: warm-up), the
train-end time (last step to ``train()``/``fit()`` returning: the final log and the
train-end hooks, the flush among them), the exit time (``train()`` returning, then
``close()`` where ours reports, to the process gone: interpreter teardown included, so
compare with the ``none`` row), the blocking waits of our reporter, "sender left
running" when our sending thread was still alive after ``close()`` returned and, for the
healthy endpoint, the progress stored in the TrainJob.

Transformers (with accelerate, which its ``Trainer`` needs): a 2-layer GPT-2 on random
tokens. Lightning: a small MLP on random data
logging its loss every step. CUDA when torch sees it, else CPU. A framework that is not
installed is skipped with a line saying so; the ``client`` rows need none. No network.

    python bench/frameworks.py [--smoke] [--steps N] [--blocked-steps N] [--only NAMES]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trainjob_status.contract import (
    CA_CERT_ENV,
    ENV_NAMES,
    GROUP,
    JOBSET_NAME_LABEL,
    TOKEN_ENV,
    URL_ENV,
    audience,
    status_path,
)

NS = "bench"
SLOW_SECONDS = 2.0
ENDPOINTS = ("healthy", "slow", "hung")
CLIENT_ENDPOINTS = (*ENDPOINTS, "drip")
DRIP_SECONDS = 0.5


def installed(*modules: str) -> list[str]:
    """The modules of ``modules`` that cannot be imported."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def lightning_installed() -> bool:
    return not installed("lightning") or not installed("pytorch_lightning")


# -- the endpoints (parent process) ---------------------------------------------------------


class Stack:
    """Our server on a devcluster (on an event loop in a thread), plus the slow and hung
    endpoints; certificates for localhost from one CA."""

    def __init__(self, workdir: Path) -> None:
        from trainjob_devcluster.harness.testing import ServingCerts

        self.workdir = workdir
        self.certs = ServingCerts.create(workdir)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(self.certs.cert_file, self.certs.key_file)
        self.stack: Any = None
        self.cluster: Any = None
        self.server_url = ""
        self._jobs = 0
        self._slow: ThreadingHTTPServer | None = None
        self._hung: socket.socket | None = None
        self._drip: socket.socket | None = None
        self._held: list[socket.socket] = []

    def start(self) -> None:
        from trainjob_devcluster.harness.testing import BackgroundStack
        from trainjob_status_server.config import Config

        self.stack = BackgroundStack(
            self.certs,
            timeout=120,
            write_mode="direct",  # a post answered is a post written
            # As deployed: the API budget, its timeout, the certificate reload interval.
            kube_api_qps=Config.kube_api_qps,
            kube_api_burst=Config.kube_api_burst,
            kube_api_timeout=Config.kube_api_timeout,
            tls_reload_interval=Config.tls_reload_interval,
        )
        self.cluster = self.stack.cluster
        self.server_url = self.stack.server.url.replace("127.0.0.1", "localhost")
        self._start_slow()
        self._start_hung()
        self._start_drip()

    def new_trainjob(self) -> tuple[str, str]:
        """A fresh TrainJob with one pod; its status URL and that pod's token."""
        self._jobs += 1
        name = f"job-{self._jobs}"
        pod = f"{name}-node-0-0"
        self.stack.call(self.cluster.create_trainjob, NS, name)
        labels = {JOBSET_NAME_LABEL: name}
        self.stack.call(self.cluster.create_pod, NS, pod, labels=labels)
        token = self.stack.call(
            self.cluster.request_token, NS, "default", [audience(NS, name)], pod=pod
        )
        return self.server_url + status_path(NS, name), token

    def stored_progress(self, url: str) -> object:
        name = url.rsplit("/", 2)[-2]
        obj = self.stack.call(self.cluster.get, "trainjobs", NS, name, GROUP)
        return ((obj or {}).get("status") or {}).get("trainerStatus", {}).get("progressPercentage")

    def _start_slow(self) -> None:
        class Slow(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(SLOW_SECONDS)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
        server.daemon_threads = True
        server.socket = self.context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._slow = server

    def _start_hung(self) -> None:
        listener = socket.create_server(("127.0.0.1", 0))

        def accept() -> None:
            with contextlib.suppress(OSError):
                while True:
                    connection, _ = listener.accept()
                    self._held.append(connection)  # open, never read, never answered

        threading.Thread(target=accept, daemon=True).start()
        self._hung = listener

    def _start_drip(self) -> None:
        listener = socket.create_server(("127.0.0.1", 0))

        def drip(connection: socket.socket) -> None:
            # A TLS handshake record announcing 16 KiB, then its bytes, slowly: each read
            # of the client's handshake gets a byte well within any socket timeout.
            with contextlib.suppress(OSError):
                connection.sendall(b"\x16\x03\x03\x40\x00")
                while True:
                    time.sleep(DRIP_SECONDS)
                    connection.sendall(b"\x02")

        def accept() -> None:
            with contextlib.suppress(OSError):
                while True:
                    connection, _ = listener.accept()
                    self._held.append(connection)
                    threading.Thread(target=drip, args=(connection,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        self._drip = listener

    def url(self, endpoint: str) -> tuple[str, str]:
        if endpoint == "healthy":
            return self.new_trainjob()
        assert self._slow is not None
        assert self._hung is not None
        assert self._drip is not None
        listening = {"hung": self._hung, "drip": self._drip}
        if endpoint == "slow":
            port = self._slow.server_address[1]
        else:
            port = listening[endpoint].getsockname()[1]
        return f"https://localhost:{port}{status_path(NS, 'job')}", "bench-token"

    def close(self) -> None:
        if self._slow is not None:
            self._slow.shutdown()
        if self._hung is not None:
            self._hung.close()
        if self._drip is not None:
            self._drip.close()
        for connection in self._held:
            connection.close()
        if self.stack is not None:
            self.stack.close()


# -- the scenarios (child processes) ---------------------------------------------------------


class Timing:
    """Step-end times, and when training returned."""

    def __init__(self) -> None:
        self.steps: list[float] = []

    def rate(self) -> float:
        if len(self.steps) < 3:
            return float("nan")
        return (len(self.steps) - 2) / (self.steps[-1] - self.steps[1])


def device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    # One core for the model: the other is left to the sending thread and the server, so
    # rows with and without reporting compete for the same share of the machine.
    torch.set_num_threads(1)
    return "cpu"


def run_transformers(reporting: str, steps: int, smoke: bool, workdir: str) -> dict[str, Any]:
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    timing = Timing()

    class StepClock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            timing.steps.append(time.perf_counter())

    width, length, vocab = (64, 32, 512) if smoke else (128, 64, 1000)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=width, vocab_size=vocab, n_positions=length)
    torch.manual_seed(0)
    tokens = torch.randint(0, vocab, (max(64, steps * 8), length))
    dataset = [{"input_ids": row, "labels": row} for row in tokens]
    args = TrainingArguments(
        output_dir=workdir,
        max_steps=steps,
        per_device_train_batch_size=8,
        logging_steps=10,
        save_strategy="no",
        report_to="none",  # the pod's variables still add "kubeflow" (the built-in)
        disable_tqdm=True,
        use_cpu=device() == "cpu",
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=GPT2LMHeadModel(config), args=args, train_dataset=dataset, callbacks=[StepClock()]
    )
    if reporting == "ours":
        from trainjob_status.integrations.transformers import attach

        attach(trainer)
    names = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    trainer.train()
    returned = time.perf_counter()
    return {
        "steps": len(timing.steps),
        "rate": timing.rate(),
        "train_end": returned - timing.steps[-1],
        "callbacks": [n for n in names if n in ("KubeflowCallback", "TrainJobStatusCallback")],
    }


def run_lightning(reporting: str, steps: int, smoke: bool) -> dict[str, Any]:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl  # type: ignore[no-redef]

    timing = Timing()
    width = 64 if smoke else 256

    class StepClock(pl.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, *args: Any) -> None:
            timing.steps.append(time.perf_counter())

    class Regressor(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, 1)
            )

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            inputs, target = batch
            loss = nn.functional.mse_loss(self.net(inputs), target)
            self.log("train_loss", loss, on_step=True, on_epoch=False)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    samples = max(256, steps * 32)
    data = TensorDataset(torch.randn(samples, width), torch.randn(samples, 1))
    callbacks: list[Any] = [StepClock()]
    if reporting == "ours":
        from trainjob_status.integrations.lightning import TrainJobStatusCallback

        callbacks.append(TrainJobStatusCallback())
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="gpu" if device() == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(Regressor(), DataLoader(data, batch_size=32, shuffle=True))
    returned = time.perf_counter()
    return {
        "steps": len(timing.steps),
        "rate": timing.rate(),
        "train_end": returned - timing.steps[-1],
        "callbacks": ["TrainJobStatusCallback"] if reporting == "ours" else [],
    }


def run_client(steps: int) -> dict[str, Any]:
    """What the callbacks do, without a framework: a report per step, train end's report
    and flush."""
    from trainjob_status import default_reporter, update_trainjob_status

    timing = Timing()
    for step in range(1, steps + 1):
        update_trainjob_status(min(99, 100 * step // steps), steps - step, {"loss": 1 / step})
        timing.steps.append(time.perf_counter())
    reporter = default_reporter()
    assert reporter is not None
    reporter.report(100, 0)
    reporter.flush()
    return {
        "steps": len(timing.steps),
        "rate": timing.rate(),
        "train_end": time.perf_counter() - timing.steps[-1],
        "callbacks": [],
    }


def child(framework: str, reporting: str, steps: int, smoke: bool) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        if framework == "transformers":
            result = run_transformers(reporting, steps, smoke, workdir)
        elif framework == "lightning":
            result = run_lightning(reporting, steps, smoke)
        else:
            result = run_client(steps)
    result["returned_at"] = time.time()
    waits = None
    left = False
    if reporting == "ours":
        from trainjob_status import default_reporter

        reporter = default_reporter()
        if reporter is not None:
            reporter.close()  # as a careful script does; the exit hook then has nothing to do
            waits = getattr(reporter.stats, "waits", None)  # older clients do not count
            left = any(t.name == "trainjob-status" for t in threading.enumerate())
    result["waits"] = waits
    result["sender_left"] = left
    print("RESULT " + json.dumps(result), flush=True)


# -- the driver ------------------------------------------------------------------------------


@dataclass
class Scenario:
    framework: str  # transformers, lightning, client
    reporting: str  # none, builtin, ours
    endpoint: str | None
    steps: int

    @property
    def label(self) -> str:
        return f"{self.framework:<12} {self.reporting:<8} {self.endpoint or '-':<8}"


def scenarios(args: argparse.Namespace) -> Iterator[Scenario]:
    only = set(args.only.split(",")) if args.only else {"client", "transformers", "lightning"}
    if "client" in only:
        for endpoint in CLIENT_ENDPOINTS:
            yield Scenario("client", "ours", endpoint, args.steps)
    if "transformers" in only:
        yield Scenario("transformers", "none", None, args.steps)
        for endpoint in ENDPOINTS:
            # Against the hung endpoint the built-in blocks every step for its 5 s timeout.
            steps = args.blocked_steps if endpoint == "hung" else args.steps
            yield Scenario("transformers", "builtin", endpoint, steps)
            yield Scenario("transformers", "ours", endpoint, args.steps)
    if "lightning" in only:
        yield Scenario("lightning", "none", None, args.steps)
        for endpoint in ENDPOINTS:
            yield Scenario("lightning", "ours", endpoint, args.steps)


def missing(framework: str) -> str | None:
    if framework == "client":
        return None
    if installed("torch"):
        return "torch is not installed"
    if framework == "transformers" and installed("transformers", "accelerate"):
        return "transformers or accelerate (its Trainer needs it with torch) is not installed"
    if framework == "lightning" and not lightning_installed():
        return "Lightning (lightning or pytorch_lightning) is not installed"
    return None


def run(stack: Stack, scenario: Scenario, smoke: bool, workdir: Path) -> str:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ENV_NAMES and k not in ("RANK", "WORLD_SIZE")
    }
    env.pop("DISABLE_KUBEFLOW_INTEGRATION", None)
    env["TOKENIZERS_PARALLELISM"] = "false"
    url = None
    if scenario.endpoint is not None:
        url, token = stack.url(scenario.endpoint)
        token_file = workdir / f"token-{time.monotonic_ns()}"
        token_file.write_text(token)
        env.update({URL_ENV: url, TOKEN_ENV: str(token_file), CA_CERT_ENV: str(workdir / "ca.crt")})
    command = [
        sys.executable, __file__, "--child", scenario.framework, scenario.reporting,
        "--steps", str(scenario.steps), *(["--smoke"] if smoke else []),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    gone = time.time()
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return f"{scenario.label} FAILED (exit {done.returncode}): " + " | ".join(tail)
    result = json.loads(lines[-1][len("RESULT ") :])
    stored = ""
    if scenario.endpoint == "healthy" and url is not None:
        stored = f"  stored progress {stack.stored_progress(url)}"
    waits = "" if result["waits"] is None else f"  blocking waits {result['waits']}"
    left = "  sender left running" if result["sender_left"] else ""
    posting = ",".join(result["callbacks"]) or "-"
    return (
        f"{scenario.label} steps {result['steps']:>5}  steps/s {result['rate']:8.1f}  "
        f"train end {result['train_end']:6.2f} s  exit {gone - result['returned_at']:6.2f} s"
        f"{waits}{left}  callbacks {posting}{stored}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and few steps")
    parser.add_argument("--steps", type=int, help="steps per run (default 2000, smoke 60)")
    parser.add_argument(
        "--blocked-steps",
        type=int,
        help="steps for the built-in callback against the hung endpoint, where each one "
        "waits for its 5 s timeout (default 8, smoke 4)",
    )
    parser.add_argument(
        "--only", help="comma-separated: client, transformers, lightning (default: all)"
    )
    parser.add_argument(
        "--child", nargs=2, metavar=("FRAMEWORK", "REPORTING"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    args.steps = args.steps or (60 if args.smoke else 2000)
    args.blocked_steps = args.blocked_steps or (4 if args.smoke else 8)
    if args.child:
        child(*args.child, args.steps, args.smoke)
        return
    plan = list(scenarios(args))
    reasons = {s.framework: missing(s.framework) for s in plan}
    for framework, reason in reasons.items():
        if reason:
            print(f"skipping {framework}: {reason}")
    plan = [s for s in plan if not reasons[s.framework]]
    if any(s.framework != "client" for s in plan):
        import torch

        print(f"torch {torch.__version__} on {device()}")
    print(
        f"python {sys.version.split()[0]}; slow endpoint answers after {SLOW_SECONDS:g} s; "
        "flush timeout 5 s; exit = train() returning (then close()) to the process gone"
    )
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        stack = Stack(workdir)
        stack.start()
        try:
            for scenario in plan:
                print(run(stack, scenario, args.smoke, workdir), flush=True)
        finally:
            stack.close()


if __name__ == "__main__":
    main()

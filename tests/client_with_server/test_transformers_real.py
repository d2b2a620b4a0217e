"""Against transformers itself (installed without torch): its ``CallbackHandler``,
``TrainerState``, ``TrainerControl``, ``TrainingArguments`` and built-in
``KubeflowCallback``, driven as ``Trainer.train`` drives them (``hf_trainer.py``). Ours
alone, ours attached (the built-in removed), the built-in alone posting to our server with
its own payload, and the warning when both would post. ``test_transformers_oldest.py``
repeats the key cases against the oldest transformers we support."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from pathlib import Path

import pytest
import transformers
from prometheus_client.parser import text_string_to_metric_families
from transformers.integrations import KubeflowCallback

from client.sink import Sink
from trainjob_devcluster import DevCluster
from trainjob_status import StatusReporter
from trainjob_status.contract import ENV_NAMES
from trainjob_status.integrations.transformers import TrainJobStatusCallback, attach
from trainjob_status.transport import USER_AGENT
from trainjob_status_server.app import StatusServer

from .conftest import Pod, stored_status
from .hf_trainer import ShellTrainer, arguments

WARNING = "transformers' KubeflowCallback may also be posting this TrainJob's status"


@pytest.fixture
def outside_a_trainjob(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*ENV_NAMES, "DISABLE_KUBEFLOW_INTEGRATION"):
        monkeypatch.delenv(name, raising=False)


def in_a_pod(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]) -> None:
    """The variables the injector sets: transformers reads them from os.environ (and a
    launcher's rank variables would silence our reporter)."""
    for name in ("DISABLE_KUBEFLOW_INTEGRATION", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)


def accepted_posts(server: StatusServer) -> float:
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "trainjob_status_requests_total" and sample.labels["code"] == "200":
                return sample.value
    return 0.0


def test_the_installed_transformers_has_the_builtin_callback_and_no_torch() -> None:
    import sys

    assert "torch" not in sys.modules
    assert KubeflowCallback.__module__ == "transformers.integrations.integration_utils"
    assert tuple(int(part) for part in transformers.__version__.split(".")[:2]) >= (5, 4)


@pytest.mark.usefixtures("outside_a_trainjob")
async def test_ours_alone_writes_the_run_to_the_trainjob(
    pod: Pod, devcluster: DevCluster, tmp_path: Path
) -> None:
    reporter = StatusReporter(environ=pod.environ, min_interval=60)
    trainer = ShellTrainer(arguments(str(tmp_path)), [TrainJobStatusCallback(reporter)])
    assert trainer.callback_names() == ["DefaultFlowCallback", "TrainJobStatusCallback"]
    await asyncio.to_thread(trainer.train)
    assert reporter.stats.delivered == reporter.stats.posts
    status = stored_status(devcluster)
    assert status is not None
    assert status.pop("lastUpdatedTime").endswith("Z")
    # Floats as the client formats them: at most 6 significant digits.
    assert status == {
        "progressPercentage": 100,
        "estimatedRemainingSeconds": 0,
        "metrics": [
            {"name": "step", "value": "20"},
            {"name": "epoch", "value": "2"},
            {"name": "total_steps", "value": "20"},
            {"name": "loss", "value": "0.47619"},
            {"name": "grad_norm", "value": "1.25"},
            {"name": "learning_rate", "value": "5e-05"},
            {"name": "train_runtime", "value": "12.3456"},
            {"name": "train_samples_per_second", "value": "41.472"},
            {"name": "train_steps_per_second", "value": "1.62"},
            {"name": "total_flos", "value": "1.56141e+16"},
            {"name": "train_loss", "value": "2.71828"},
        ],
    }
    await asyncio.to_thread(reporter.close, 0)


async def test_the_builtin_callback_alone_posts_its_payload_to_our_server(
    pod: Pod,
    server: StatusServer,
    devcluster: DevCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    in_a_pod(monkeypatch, pod.environ)
    args = arguments(str(tmp_path))  # report_to "none": the env var switches it on anyway
    assert args.report_to == ["kubeflow"]
    trainer = ShellTrainer(args)
    assert trainer.callback_names() == ["DefaultFlowCallback", "KubeflowCallback"]
    before = await asyncio.to_thread(accepted_posts, server)
    await asyncio.to_thread(trainer.train)
    # Train begin and train end are forced; the steps fall in its 5 s throttle.
    assert await asyncio.to_thread(accepted_posts, server) - before == 2
    status = stored_status(devcluster)
    assert status is not None
    # Sent as datetime.isoformat() with +00:00 and microseconds; stored as RFC 3339.
    assert status.pop("lastUpdatedTime").endswith("Z")
    assert status == {
        "progressPercentage": 100,
        "estimatedRemainingSeconds": 0,
        "metrics": [
            {"name": "loss", "value": "0.47619047619047616"},
            {"name": "grad_norm", "value": "1.25"},
            {"name": "learning_rate", "value": "5e-05"},
            {"name": "epoch", "value": "2.0"},
            {"name": "train_runtime", "value": "12.3456"},
            {"name": "train_samples_per_second", "value": "41.472"},
            {"name": "train_steps_per_second", "value": "1.62"},
            {"name": "total_flos", "value": "1.5614101487616e+16"},
            {"name": "train_loss", "value": "2.718281828459045"},
        ],
    }


def test_attach_removes_the_builtin_so_only_ours_posts(
    sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "trainjob_status")
    in_a_pod(monkeypatch, sink.environ())
    trainer = ShellTrainer(arguments(str(tmp_path)))
    assert trainer.callback_names() == ["DefaultFlowCallback", "KubeflowCallback"]
    reporter = StatusReporter(min_interval=60)
    ours = attach(trainer, TrainJobStatusCallback(reporter))
    assert trainer.callback_names() == ["DefaultFlowCallback", "TrainJobStatusCallback"]
    assert trainer.callback_handler.callbacks[1] is ours
    trainer.train()
    reporter.close()
    assert {r.headers["user-agent"] for r in sink.requests} == {USER_AGENT}
    assert sink.requests[-1].status["progressPercentage"] == 100
    assert "removed transformers' KubeflowCallback from the trainer" in caplog.text
    assert WARNING not in caplog.text


def test_both_posting_is_warned_about_once(
    sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "trainjob_status")
    in_a_pod(monkeypatch, sink.environ())
    reporter = StatusReporter(min_interval=60)
    trainer = ShellTrainer(arguments(str(tmp_path)), [TrainJobStatusCallback(reporter)])
    assert trainer.callback_names() == [
        "DefaultFlowCallback",
        "KubeflowCallback",
        "TrainJobStatusCallback",
    ]
    trainer.train()
    reporter.close()
    assert caplog.text.count(WARNING) == 1
    agents = {r.headers["user-agent"] for r in sink.requests}
    assert USER_AGENT in agents
    assert any(agent.startswith("Python-urllib/") for agent in agents)


def test_switched_off_by_disable_kubeflow_integration_there_is_nothing_to_warn_about(
    sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "trainjob_status")
    in_a_pod(monkeypatch, sink.environ())
    monkeypatch.setenv("DISABLE_KUBEFLOW_INTEGRATION", "true")
    reporter = StatusReporter(min_interval=60)
    trainer = ShellTrainer(arguments(str(tmp_path)), [TrainJobStatusCallback(reporter)])
    assert trainer.callback_names() == ["DefaultFlowCallback", "TrainJobStatusCallback"]
    trainer.train()
    reporter.close()
    assert WARNING not in caplog.text
    assert {r.headers["user-agent"] for r in sink.requests} == {USER_AGENT}


@pytest.mark.usefixtures("outside_a_trainjob")
def test_only_world_process_zero_reports(sink: Sink, tmp_path: Path) -> None:
    reporter = StatusReporter(environ=sink.environ())
    trainer = ShellTrainer(
        arguments(str(tmp_path)), [TrainJobStatusCallback(reporter)], is_world_process_zero=False
    )
    trainer.train()
    reporter.close()
    assert reporter.stats.posts == 0
    assert sink.requests == []

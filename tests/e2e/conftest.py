"""End-to-end pieces: external binaries (a missing one skips locally and fails in CI), a
status server with the exporter on a metrics port, and a real Prometheus scraping it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from trainjob_devcluster.harness.pytest_plugin import MakeStatusServer, require_binary
from trainjob_devcluster.harness.testing import ServingCerts, eventually, free_port, status_path
from trainjob_status_server.app import StatusServer
from trainjob_status_server.metrics.exporter import Exporter

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests" / "prometheus"
RULES = MANIFESTS / "rules" / "trainjob-status.rules.yaml"
DASHBOARD = MANIFESTS / "dashboards" / "trainjob-status.json"
JOB = "trainjob-status"  # the scrape job's name, as the ServiceMonitor makes it


class Stack:
    """A status server (accept-all auth, HTTPS) and its exporter on the server's metrics
    port: the target Prometheus scrapes."""

    def __init__(self, server: StatusServer, exporter: Exporter, metrics_url: str) -> None:
        self.server = server
        self.exporter = exporter
        self.metrics_url = metrics_url
        self.session: aiohttp.ClientSession | None = None

    @property
    def target(self) -> str:
        return self.metrics_url.removeprefix("http://").removesuffix("/metrics")

    async def post(self, namespace: str, name: str, trainer_status: dict[str, Any]) -> None:
        assert self.session is not None
        url = self.server.url + status_path(namespace, name)
        body = json.dumps({"trainerStatus": trainer_status})
        headers = {"Authorization": "Bearer e2e"}
        async with self.session.post(url, data=body, headers=headers) as response:
            assert response.status == 200, await response.text()


@pytest_asyncio.fixture
async def stack(
    serving_certs: ServingCerts, make_status_server: MakeStatusServer
) -> AsyncIterator[Stack]:
    """The server with its exporter on its own metrics port: the target Prometheus
    scrapes."""
    async with make_status_server() as server:
        connector = aiohttp.TCPConnector(ssl=serving_certs.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            stack = Stack(server, server.exporter, server.metrics_url + "/metrics")
            stack.session = session
            yield stack


class Prometheus:
    """A real Prometheus process and its HTTP API."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        self._proc: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(
        self,
        target: str,
        rule_groups: dict[str, Any] | None = None,
        scrape_configs: list[dict[str, Any]] | None = None,
    ) -> None:
        """Scrape ``target`` (host:port) every second as job trainjob-status (or as
        ``scrape_configs`` say), evaluating ``rule_groups`` (a rule file's content)
        every second."""
        jobs = scrape_configs or [{"job_name": JOB, "static_configs": [{"targets": [target]}]}]
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": jobs,
        }
        if rule_groups is not None:
            rules = self.workdir / "rules.yaml"
            rules.write_text(yaml.safe_dump(rule_groups, sort_keys=False))
            config["rule_files"] = [str(rules)]
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        with self.log.open("wb") as log:
            self._proc = await asyncio.create_subprocess_exec(
                self.binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                stdout=log,
                stderr=log,
            )
        self._session = aiohttp.ClientSession()
        try:
            await eventually(self._ready, what="prometheus to start")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        if self._session is not None:
            await self._session.close()

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def _ready(self) -> bool:
        assert self._session is not None
        assert self._proc is not None
        if self._proc.returncode is not None:
            raise AssertionError(f"prometheus exited:\n{self.logs()}")
        with contextlib.suppress(aiohttp.ClientError):
            async with self._session.get(self.url + "/-/ready") as response:
                return response.status == 200
        return False

    async def api(self, path: str, **params: str) -> Any:
        """``data`` of a successful API answer; anything else fails the test."""
        assert self._session is not None
        async with self._session.get(self.url + "/api/v1/" + path, params=params) as response:
            body = await response.json()
        assert body.get("status") == "success", (path, params, body)
        return body["data"]

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (label sets with values), or a scalar as one sample."""
        data = await self.api("query", query=expr)
        if data["resultType"] == "vector":
            return [
                {"labels": item["metric"], "value": float(item["value"][1])}
                for item in data["result"]
            ]
        if data["resultType"] == "scalar":
            return [{"labels": {}, "value": float(data["result"][1])}]
        raise AssertionError(f"unexpected result type {data['resultType']} for {expr}")


@pytest.fixture
def prometheus_binary() -> str:
    return require_binary("prometheus")


@pytest.fixture
def promtool_binary() -> str:
    return require_binary("promtool", "prometheus")


@pytest_asyncio.fixture
async def prometheus(prometheus_binary: str, tmp_path: Path) -> AsyncIterator[Prometheus]:
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    running = Prometheus(prometheus_binary, workdir)
    try:
        yield running
    finally:
        await running.stop()


def load_rules() -> dict[str, Any]:
    rules: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return rules

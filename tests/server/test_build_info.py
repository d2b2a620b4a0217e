"""trainjob_status_build_info on the running server's metrics port, in both formats."""

from __future__ import annotations

import platform
import tomllib
from pathlib import Path

import aiohttp
import pytest

from trainjob_status_server.app import StatusServer

OPENMETRICS = "application/openmetrics-text;version=1.0.0"
PYPROJECT = Path(__file__).resolve().parents[2] / "server" / "pyproject.toml"
VERSION: str = tomllib.loads(PYPROJECT.read_text())["project"]["version"]


@pytest.mark.parametrize("accept", [None, OPENMETRICS])
async def test_build_info_is_one_with_the_version_and_python(
    server: StatusServer, accept: str | None
) -> None:
    headers = {} if accept is None else {"Accept": accept}
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.metrics_url + "/metrics", headers=headers) as answer,
    ):
        assert answer.status == 200
        page = await answer.text()
    python = platform.python_version()
    lines = [line for line in page.splitlines() if "trainjob_status_build_info" in line]
    assert lines == [
        "# HELP trainjob_status_build_info 1, labelled with the server's version and the "
        "Python version it runs on.",
        "# TYPE trainjob_status_build_info gauge",
        f'trainjob_status_build_info{{python="{python}",version="{VERSION}"}} 1.0',
    ]

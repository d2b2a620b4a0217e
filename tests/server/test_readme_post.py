"""docs/server.md's "Posting a status" section is what the server does: the curl example's
body is accepted and echoed, and every example error row is the exact answer to its
body."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from trainjob_devcluster import DevCluster
from trainjob_status.contract import GROUP

from .conftest import NS, Poster

SERVER_PAGE = Path(__file__).resolve().parents[2] / "docs" / "server.md"
JOB = "llama"


def section() -> str:
    text = SERVER_PAGE.read_text()
    return text.split("### Posting a status\n", 1)[1].split("\n## ", 1)[0]


def curl_body() -> dict[str, Any]:
    command = section().split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    words = shlex.split(command, posix=True)
    body: dict[str, Any] = json.loads(words[words.index("--data") + 1])
    return body


def error_rows() -> list[tuple[int, str, str, str]]:
    """(code, reason, body, message) of each row of the examples table."""
    rows = []
    for line in section().splitlines():
        found = re.fullmatch(r"\| (\d{3}) `(\w+)` \| [^|]+ \| `([^`]*)` \| `([^`]*)` \|", line)
        if found:
            code, reason, body, message = found.groups()
            rows.append((int(code), reason, body, message))
    return rows


async def test_the_curl_example_is_accepted_and_echoed(
    devcluster: DevCluster, poster: Poster
) -> None:
    devcluster.create_trainjob(NS, JOB)
    sent = curl_body()
    code, answer = await poster.post(JOB, sent)
    assert code == 200, answer
    echoed = dict(answer["trainerStatus"])
    assert echoed.pop("lastUpdatedTime")
    assert echoed == sent["trainerStatus"]
    stored = devcluster.get("trainjobs", NS, JOB, GROUP)
    assert stored is not None
    assert stored["status"]["trainerStatus"] == answer["trainerStatus"]


async def test_every_example_error_is_the_servers_answer(
    devcluster: DevCluster, poster: Poster
) -> None:
    devcluster.create_trainjob(NS, JOB)
    rows = error_rows()
    assert [code for code, *_ in rows] == [422, 422, 422, 422, 404]
    for code, reason, body, message in rows:
        name = "absent" if code == 404 else JOB
        got, answer = await poster.post(name, None, raw=body.encode())
        assert (got, answer["reason"], answer["message"]) == (code, reason, message), body
    stored = devcluster.get("trainjobs", NS, JOB, GROUP)
    assert stored is not None
    assert "trainerStatus" not in (stored.get("status") or {})

"""Replays the posts Transformers' ``KubeflowCallback`` makes during a training run, as
docs/design.md describes them (its own urllib client, JSON, ``isoformat()`` times):

- train begin: 0% with metric ``total_steps``;
- each step: progress capped at 99 with an integer ETA and metrics ``current_step``,
  ``total_steps``, ``current_epoch`` (rounded to 2 places) and the numeric log values,
  all as ``str(value)`` with no caps;
- train end: 100%, ETA 0, the log values.
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import urllib.error
import urllib.request
from typing import Any


def posts(total_steps: int, steps_per_epoch: int) -> list[dict[str, Any]]:
    """The trainerStatus bodies of one run, in order."""
    logs: dict[str, Any] = {}
    out: list[dict[str, Any]] = [{"progressPercentage": 0, "metrics": {"total_steps": total_steps}}]
    for step in range(1, total_steps + 1):
        logs.update({"loss": 2.0 / step, "learning_rate": 5e-05 * (1 - step / total_steps)})
        epoch = step / steps_per_epoch
        logs["epoch"] = round(epoch, 2)
        metrics = {
            **logs,
            "current_step": step,
            "total_steps": total_steps,
            "current_epoch": round(epoch, 2),
        }
        progress = min(int(step / total_steps * 100), 99)
        eta = int(0.25 * (total_steps - step))
        out.append(
            {"progressPercentage": progress, "estimatedRemainingSeconds": eta, "metrics": metrics}
        )
    out.append({"progressPercentage": 100, "estimatedRemainingSeconds": 0, "metrics": dict(logs)})
    for status in out:
        status["metrics"] = [
            {"name": str(k), "value": str(v)} for k, v in status["metrics"].items()
        ]
    return out


def post(url: str, token: str, ca_file: str, status: dict[str, Any]) -> int:
    """One post as the callback sends it; returns the HTTP status."""
    body = {"trainerStatus": {"lastUpdatedTime": dt.datetime.now(dt.UTC).isoformat(), **status}}
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cafile=ca_file)
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code

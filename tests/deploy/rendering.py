"""Rendering the kustomize overlays with the real kubectl (helpers, no tests).

kubectl is on every developer machine and in CI. Missing locally, these tests skip; with
``TRAINJOB_STATUS_CI`` set (``.ci/run`` sets it) a missing kubectl fails them instead,
so CI can never skip them silently.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = {
    "base": MANIFESTS / "base",
    "cert-manager": MANIFESTS / "overlays" / "cert-manager",
    "token-review": MANIFESTS / "overlays" / "token-review",
    "prometheus": MANIFESTS / "overlays" / "prometheus",
}

Doc = dict[str, Any]


def require(binary: str) -> str:
    found = shutil.which(binary)
    if found is None:
        if os.environ.get("TRAINJOB_STATUS_CI"):
            pytest.fail(f"{binary} is required in CI and is not installed")
        pytest.skip(f"{binary} is not installed")
    return found


@functools.cache
def _render(path: Path) -> tuple[Doc, ...]:
    kubectl = require("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def render(overlay: str) -> list[Doc]:
    """The overlay's objects as ``kubectl kustomize`` renders them."""
    return list(_render(OVERLAYS[overlay]))


def one(docs: list[Doc], kind: str, name: str = "trainjob-status") -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def names(docs: list[Doc], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] == kind}

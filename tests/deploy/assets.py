"""Where the tools and files built from Go modules are (helpers, no tests): helm, from
tools/helm at the version its go.mod pins, and the CRDs listed in tools/crds/crds.txt.
``make deploy-assets`` puts them in the cache, ``$TRAINJOB_STATUS_CACHE`` or else
``~/.cache/trainjob-status``; these helpers find them by the same rule.

Missing locally, the tests that need them skip, saying which make target builds them;
under CI (``TRAINJOB_STATUS_CI=1``) they fail instead, as tests needing a missing binary
do.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELM_GO_MOD = ROOT / "tools" / "helm" / "go.mod"
HELM_MODULE = "helm.sh/helm/v4"
CRD_LIST = ROOT / "tools" / "crds" / "crds.txt"


def cache() -> Path:
    """The cache folder, as the Makefile names it."""
    explicit = os.environ.get("TRAINJOB_STATUS_CACHE")
    return Path(explicit) if explicit else Path.home() / ".cache" / "trainjob-status"


def _missing(what: str, target: str) -> None:
    build = f"make {target}; it needs Go" if shutil.which("go") is None else f"make {target}"
    message = f"{what} is not built ({build})"
    if os.environ.get("TRAINJOB_STATUS_CI") == "1":
        pytest.fail(message)
    pytest.skip(message)


def helm_version() -> str:
    """The helm version tools/helm/go.mod pins."""
    for line in HELM_GO_MOD.read_text().splitlines():
        # "require MODULE VERSION", or "MODULE VERSION" inside a require block.
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == HELM_MODULE:
            return words[1]
    raise AssertionError(f"{HELM_GO_MOD} requires no {HELM_MODULE}")


def helm() -> str:
    """The path of the helm binary; skips (fails under CI) where it is not built."""
    path = cache() / "helm" / helm_version() / "helm"
    if not path.is_file():
        _missing(f"helm {helm_version()}", "helm-bin")
    return str(path)


@dataclass(frozen=True)
class Crd:
    module: str
    version: str
    path: str

    @property
    def file(self) -> Path:
        name = self.module.rsplit("/", 1)[-1]
        return cache() / "crds" / f"{name}@{self.version}" / self.path.rsplit("/", 1)[-1]


def crds() -> list[Crd]:
    """The CRDs tools/crds/crds.txt pins, in its order."""
    found: list[Crd] = []
    for line in CRD_LIST.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            module, version, path = line.split()
            found.append(Crd(module, version, path))
    return found


def crd_files() -> list[Path]:
    """The CRD files in the cache; skips (fails under CI) where any is missing."""
    files = [crd.file for crd in crds()]
    if not all(f.is_file() for f in files):
        _missing("the CRDs of tools/crds/crds.txt", "crds")
    return files

"""Rendering the kustomize overlays with the real kubectl (helpers, no tests).

kubectl is on every developer machine and in CI. Missing locally, these tests skip; with
``TRAINJOB_STATUS_CI`` set (``.ci/run`` sets it) a missing kubectl fails them instead,
so CI can never skip them silently.

An overlay with components added, or with another namespace, is rendered the way a
platform team would make it: a copy of the overlay's kustomization.yaml with those
entries changed, in a directory of its own.
"""

from __future__ import annotations

import functools
import itertools
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from trainjob_devcluster.harness.pytest_plugin import require_binary

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = {
    "base": MANIFESTS / "base",
    "quick-start": MANIFESTS / "overlays" / "quick-start",
    "kubeflow": MANIFESTS / "overlays" / "kubeflow",
}
# The namespace each overlay installs into.
TARGETS = {
    "base": "trainjob-status",
    "quick-start": "trainjob-status",
    "kubeflow": "kubeflow-system",
}
COMPONENTS = {
    "cert-manager": MANIFESTS / "components" / "cert-manager",
    "token-review": MANIFESTS / "components" / "token-review",
    "prometheus": MANIFESTS / "prometheus",
    "progress-api": MANIFESTS / "components" / "progress-api",
}
# Added for a migration only: rendered with the others by its own test, not in every
# combination.
EXTRA_COMPONENTS = {
    "override-existing": MANIFESTS / "components" / "override-existing",
    "secure-metrics": MANIFESTS / "components" / "secure-metrics",
    "metrics-token-secret": MANIFESTS / "components" / "metrics-token-secret",
    "api-priority": MANIFESTS / "components" / "api-priority",
}
NAMESPACE_REFERENCES = MANIFESTS / "namespace-references"
SCRAPE_SETTINGS = MANIFESTS / "scrape-settings"

Doc = dict[str, Any]


def combinations() -> list[tuple[str, ...]]:
    """Every subset of the components in their listed order, and all of them reversed
    (they must combine freely, in any order)."""
    found: list[tuple[str, ...]] = []
    for size in range(len(COMPONENTS) + 1):
        found.extend(itertools.combinations(COMPONENTS, size))
    found.append(tuple(reversed(COMPONENTS)))
    return found


def _kustomize_text(path: Path) -> str:
    kubectl = require_binary("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _kustomize(path: Path) -> tuple[Doc, ...]:
    return tuple(d for d in yaml.safe_load_all(_kustomize_text(path)) if d)


def kustomization(overlay: str) -> Doc:
    """The overlay's kustomization.yaml, its paths made absolute. The base is given the
    overlay a platform team would write around it."""
    if overlay == "base":
        return {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": TARGETS["base"],
            "resources": [str(OVERLAYS["base"])],
            "transformers": [str(NAMESPACE_REFERENCES), str(SCRAPE_SETTINGS)],
        }
    doc: Doc = yaml.safe_load((OVERLAYS[overlay] / "kustomization.yaml").read_text())
    for key in ("resources", "components", "transformers"):
        doc[key] = [str((OVERLAYS[overlay] / p).resolve()) for p in doc.get(key) or []]
    return doc


@functools.cache
def _render(
    overlay: str,
    components: tuple[str, ...],
    namespace: str | None,
    image: str | None,
    exactly: bool = False,
) -> tuple[Doc, ...]:
    if not components and namespace is None and image is None and not exactly:
        return _kustomize(OVERLAYS[overlay])
    return tuple(
        d
        for d in yaml.safe_load_all(_render_text(overlay, components, namespace, image, exactly))
        if d
    )


def render_text(overlay: str, components: tuple[str, ...]) -> str:
    """What ``kubectl kustomize`` prints for the overlay with ``components`` added."""
    return _render_text(overlay, components, None, None, False)


def _render_text(
    overlay: str,
    components: tuple[str, ...],
    namespace: str | None,
    image: str | None,
    exactly: bool,
) -> str:
    doc = kustomization(overlay)
    known = {**COMPONENTS, **EXTRA_COMPONENTS}
    own = [] if exactly else doc.get("components", [])
    doc["components"] = [*own, *(str(known[c]) for c in components)]
    if namespace is not None:
        doc["namespace"] = namespace
    if image is not None:
        # What `kustomize edit set image trainjob-status=IMAGE` writes.
        new_name, _, new_tag = image.rpartition(":")
        entry = {"name": "trainjob-status", "newName": new_name, "newTag": new_tag}
        kept = [e for e in doc.get("images", []) if e["name"] != entry["name"]]
        doc["images"] = [*kept, entry]
    with tempfile.TemporaryDirectory() as scratch:
        # kustomize takes no absolute paths: each is made relative to the new directory.
        for key in ("resources", "components", "transformers"):
            doc[key] = [os.path.relpath(p, scratch) for p in doc.get(key) or []]
        (Path(scratch) / "kustomization.yaml").write_text(yaml.safe_dump(doc))
        return _kustomize_text(Path(scratch))


def render(
    overlay: str,
    *components: str,
    namespace: str | None = None,
    image: str | None = None,
    exactly: bool = False,
) -> list[Doc]:
    """The overlay's objects as ``kubectl kustomize`` renders them, with ``components``
    added to its ``components:`` (``exactly``: in place of its own), its ``namespace:``
    replaced and an ``images:`` entry for ``image`` (NAME:TAG) added if given."""
    return list(_render(overlay, components, namespace, image, exactly))


def one(docs: list[Doc], kind: str, name: str = "trainjob-status") -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def names(docs: list[Doc], kind: str) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] == kind}

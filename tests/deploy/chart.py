"""Rendering the Helm chart with the real helm (helpers, no tests), and the values that
stand for each kustomize overlay and component."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from .assets import helm
from .rendering import ROOT, TARGETS, Doc, combinations

CHART = ROOT / "charts" / "trainjob-status"
CI_VALUES = CHART / "ci"
RELEASE = "trainjob-status"
# Labels Helm's own conventions add to every object's metadata (never to selectors or
# the pod template); the kustomize overlays have no such labels.
HELM_LABELS = (
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)

# The values that make the chart render what each overlay renders, and the namespace its
# release goes into. The quick-start creates its namespace, so Helm keeps the release
# record in another one.
OVERLAY_VALUES: dict[str, dict[str, Any]] = {
    "base": {},
    "quick-start": {"namespace": {"name": TARGETS["quick-start"], "create": True}},
    "kubeflow": {
        "commonLabels": {"app.kubernetes.io/part-of": "kubeflow"},
        "metrics": {"secure": True},
    },
}
RELEASE_NAMESPACES = {
    "base": TARGETS["base"],
    "quick-start": "default",
    "kubeflow": TARGETS["kubeflow"],
}
COMPONENT_VALUES: dict[str, dict[str, Any]] = {
    "cert-manager": {"certificates": {"source": "cert-manager"}},
    "token-review": {"tokenReview": True},
    "prometheus": {
        "prometheus": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "dashboard": {"enabled": True},
        }
    },
    "override-existing": {"overrideExisting": True},
    "secure-metrics": {"metrics": {"secure": True}},
    "metrics-token-secret": {"metrics": {"scrapeToken": "secret"}},
    "api-priority": {"apiPriority": {"enabled": True}},
    "progress-api": {"progressAPI": {"enabled": True}},
}


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """The layers merged as Helm merges values files: maps key by key, the last wins."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


def values_for(overlay: str, *components: str) -> dict[str, Any]:
    return merged(OVERLAY_VALUES[overlay], *(COMPONENT_VALUES[c] for c in components))


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, check=False, timeout=60)


def template(
    values: dict[str, Any] | None = None,
    *,
    namespace: str,
    values_file: Path | None = None,
) -> list[Doc]:
    """``helm template`` of the chart as release ``trainjob-status`` in ``namespace``,
    with ``values_file`` then ``values`` (written as a file) given."""
    args = ["template", RELEASE, str(CHART), "--namespace", namespace]
    if values_file is not None:
        args += ["--values", str(values_file)]
    with tempfile.TemporaryDirectory() as scratch:
        if values:
            given = Path(scratch) / "values.json"
            given.write_text(json.dumps(values))
            args += ["--values", str(given)]
        done = run_helm(*args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def without_helm_labels(doc: Doc) -> Doc:
    """``doc`` with Helm's own labels taken off its metadata."""
    labels = {k: v for k, v in doc["metadata"]["labels"].items() if k not in HELM_LABELS}
    return {**doc, "metadata": {**doc["metadata"], "labels": labels}}


def differences(want: Any, got: Any, path: str = "") -> list[str]:
    """Every path where ``got`` differs from ``want``, with both values."""
    if isinstance(want, dict) and isinstance(got, dict):
        found: list[str] = []
        for key in sorted(want.keys() | got.keys(), key=str):
            where = f"{path}.{key}"
            if key not in got:
                found.append(f"{where}: only in kustomize ({want[key]!r})")
            elif key not in want:
                found.append(f"{where}: only in helm ({got[key]!r})")
            else:
                found.extend(differences(want[key], got[key], where))
        return found
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        found = []
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            found.extend(differences(w, g, f"{path}[{i}]"))
        return found
    return [] if want == got else [f"{path}: kustomize {want!r}, helm {got!r}"]


def key(doc: Doc) -> str:
    meta = doc["metadata"]
    return f"{doc['kind']} {meta.get('namespace', '-')}/{meta['name']}"


def variants() -> list[tuple[str, tuple[str, ...]]]:
    """Every overlay with every combination of the components, the migration's component,
    API priority, secure metrics where the overlay has them not already (kustomize
    refuses them twice),
    and the token Secret for scrapes (which needs secure metrics), with and without the
    ServiceMonitor and listed before and after the components it changes."""
    found = []
    for overlay in sorted(RELEASE_NAMESPACES):
        extra = [("override-existing",), ("api-priority",)]
        if overlay == "kubeflow":
            extra += [
                ("metrics-token-secret",),
                ("prometheus", "metrics-token-secret"),
                ("metrics-token-secret", "prometheus"),
            ]
        else:
            extra += [
                ("prometheus", "secure-metrics"),
                ("secure-metrics", "metrics-token-secret"),
                ("prometheus", "secure-metrics", "metrics-token-secret"),
                ("metrics-token-secret", "secure-metrics", "prometheus"),
            ]
        found += [(overlay, c) for c in [*combinations(), *extra]]
    return found

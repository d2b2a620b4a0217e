"""docs/kubeflow.md stays true to the code and the manifests: the paths, flags, metric
names, injector outcomes and log lines it names exist, and its bound on remembered
TrainJobs is the code's."""

from __future__ import annotations

import inspect
import re

from trainjob_status_server.cli import build_parser
from trainjob_status_server.http import webhook
from trainjob_status_server.metrics.exporter import server_registry
from trainjob_status_server.metrics.series import FAMILIES
from trainjob_status_server.pods import injection

from .rendering import ROOT

DOC = (ROOT / "docs" / "kubeflow.md").read_text()


def exported_names() -> set[str]:
    """Every sample name the metrics page can carry."""
    names = {f.name for f in FAMILIES}
    for family in server_registry().collect():
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_count", "_sum"),
        }.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_every_path_it_names_exists() -> None:
    paths = set(re.findall(r"manifests/[\w./-]*\w", DOC))
    assert "manifests/overlays/kubeflow" in paths
    # The reader's own overlay, made by the steps, is the one path that is not here.
    for path in {p for p in paths if not p.startswith("manifests/overlays/my-cluster")}:
        assert (ROOT / path).exists(), path


def test_every_metric_and_outcome_it_names_exists() -> None:
    names = set(re.findall(r"\b(trainjob_[a-z_]+)", DOC))
    assert "trainjob_status_injections_total" in names
    assert names <= exported_names(), names - exported_names()
    outcomes = set(re.findall(r'result="(\w+)"', DOC)) | set(re.findall(r"\| `(\w+)`: ", DOC))
    assert {"present", "overridden", "injected"} <= outcomes
    assert outcomes <= set(injection.RESULTS)


def test_the_flag_its_variable_and_the_log_lines_are_the_codes() -> None:
    options = {o for action in _serve_actions() for o in action.option_strings}
    assert "--override-existing" in options
    assert "TRAINJOB_STATUS_OVERRIDE_EXISTING=true" in DOC
    source = inspect.getsource(webhook)
    for line in re.findall(r"\(`(trainjob pods [^`]+)`", " ".join(DOC.split())):
        assert f'"{line}"' in source, line
    assert "4,096" in DOC
    assert injection.FirstSighting().size == 4096


def _serve_actions() -> list[object]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    serve = sub.choices["serve"]
    return list(serve._actions)

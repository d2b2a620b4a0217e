"""docs/security.md stays true to the manifests: every permission any overlay grants has
a row in its permissions table saying what it is for and why it cannot be narrower."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from .rendering import MANIFESTS, ROOT

ROLE_FILES = [
    MANIFESTS / "base" / "rbac.yaml",
    MANIFESTS / "base" / "rbac-certs.yaml",
    MANIFESTS / "components" / "token-review" / "rbac.yaml",
    MANIFESTS / "components" / "secure-metrics" / "rbac.yaml",
    MANIFESTS / "components" / "progress-api" / "rbac.yaml",
]
# Components that add rules to a role of the base (a JSON patch adding to its rules).
ROLE_PATCHES = [MANIFESTS / "components" / "progress-api" / "kustomization.yaml"]


def granted_rules() -> list[dict[str, Any]]:
    rules = []
    for path in ROLE_FILES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Role", "ClusterRole"):
                rules.extend(doc["rules"])
    for path in ROLE_PATCHES:
        for patch in yaml.safe_load(path.read_text())["patches"]:
            if patch.get("target", {}).get("kind") in ("Role", "ClusterRole"):
                ops = yaml.safe_load(patch["patch"])
                rules.extend(op["value"] for op in ops if op["path"] == "/rules/-")
    assert rules
    return rules


def permission_rows() -> list[str]:
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("## Permissions", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "the permissions table has no rows"
    return rows


def rule_id(rule: dict[str, Any]) -> str:
    if "nonResourceURLs" in rule:
        return f"{rule['nonResourceURLs']}"
    return f"{rule['resources']}{rule.get('resourceNames', '')}"


def wanted_cells(rule: dict[str, Any]) -> list[list[str]]:
    """What a row's first cell must name for each part of ``rule``."""
    if "nonResourceURLs" in rule:
        return [["non-resource URL", f"`{url}`"] for url in rule["nonResourceURLs"]]
    return [
        [
            f"`{group}`" if group else '`""`',  # the core group, as the table shows it
            f"`{resource}`",
            *(f"`{n}`" for n in rule.get("resourceNames", [])),
        ]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    ]


@pytest.mark.parametrize("rule", granted_rules(), ids=rule_id)
def test_every_granted_rule_is_explained(rule: dict[str, Any]) -> None:
    """A row's first cell names the group, resource, resource name (or the non-resource
    URL) and every verb; its other two cells are not empty."""
    for wanted in wanted_cells(rule):
        matches = []
        for row in permission_rows():
            first, purpose, narrower = (cell.strip() for cell in row.strip("|").split(" | ", 2))
            verbs = first.split(" (", 1)[0].rsplit(":", 1)[-1]
            listed = {v.strip() for v in verbs.split(",")}
            if all(w in first for w in wanted) and listed == set(rule["verbs"]):
                matches.append((purpose, narrower))
        assert len(matches) == 1, (wanted, rule)
        assert all(matches[0]), matches

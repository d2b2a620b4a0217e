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
]


def granted_rules() -> list[dict[str, Any]]:
    rules = []
    for path in ROLE_FILES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Role", "ClusterRole"):
                rules.extend(doc["rules"])
    return rules


def permission_rows() -> list[str]:
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("## Permissions", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "the permissions table has no rows"
    return rows


@pytest.mark.parametrize(
    "rule", granted_rules(), ids=lambda r: f"{r['resources']}{r.get('resourceNames', '')}"
)
def test_every_granted_rule_is_explained(rule: dict[str, Any]) -> None:
    """A row's first cell names the group, resource, resource name and every verb; its
    other two cells are not empty."""
    for group in rule["apiGroups"]:
        for resource in rule["resources"]:
            wanted = [
                f"`{group}`" if group else '`""`',  # the core group, as the table shows it
                f"`{resource}`",
                *(f"`{n}`" for n in rule.get("resourceNames", [])),
            ]
            matches = []
            for row in permission_rows():
                first, purpose, narrower = (cell.strip() for cell in row.strip("|").split(" | ", 2))
                verbs = first.rsplit(":", 1)[-1].split("(")[0]
                listed = {v.strip() for v in verbs.split(",")}
                if all(w in first for w in wanted) and listed == set(rule["verbs"]):
                    matches.append((purpose, narrower))
            assert len(matches) == 1, (group, resource, rule)
            assert all(matches[0]), matches

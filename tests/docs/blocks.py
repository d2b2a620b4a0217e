"""The fenced code blocks of the documentation and what the suite does with each (no I/O
beyond reading the files).

A block is run according to its language unless an HTML comment on the line before it
says otherwise:

    <!-- docs-test: run [env=pod|none] [context=NAME] [progress=N] -->
    <!-- docs-test: skip REASON -->

- ``python``: run by default, in a fresh interpreter with the pod's variables unset
  (``env=none``); ``env=pod`` runs it in a pod's environment against our server on a
  development cluster, ``progress=N`` then expects the TrainJob to hold N percent.
  ``context=NAME`` runs it after the framework set-up of that name (``contexts.py``);
  ``context=pytest`` runs it as a test file, with the devcluster's pytest plugin.
- ``yaml``: parsed; each document with ``apiVersion`` and ``kind`` is validated against
  Kubernetes' own schemas (kinds Kubernetes does not define are checked for metadata).
  ``context=kustomization`` merges it into the quick-start overlay and renders that.
- ``sh``: runs only with ``run`` (in a temporary folder, ``bash -euo pipefail``);
  every other shell block must say why it is not run.
- Any other language (output, JSON shown as text) must say why it is not run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# README.md, the four distributions' READMEs, every page under docs/ (the site's, the
# measurement records included), manifests/**/README.md and the chart's README.
DOCUMENT_GLOBS = (
    "README.md",
    "client/README.md",
    "server/README.md",
    "plugin/README.md",
    "devcluster/README.md",
    "docs/**/*.md",
    "manifests/**/README.md",
    "charts/*/README.md",
)

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")
RUN_BY_DEFAULT = frozenset({"python", "yaml"})
_ALIASES = {"bash": "sh", "shell": "sh", "console": "sh", "yml": "yaml", "py": "python"}
KNOWN_OPTIONS = frozenset({"env", "context", "progress"})


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: str | None  # the marker comment's body, None when there is none
    options: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        if self.marker is not None and self.marker.startswith("skip"):
            return self.marker[len("skip") :].strip()
        return None

    @property
    def runs(self) -> bool:
        """Whether the suite runs (or, for YAML, checks) this block."""
        if self.marker is not None:
            return self.marker.split()[0] == "run"
        return self.language in RUN_BY_DEFAULT


def documents(root: Path = ROOT) -> list[Path]:
    found: set[Path] = set()
    for pattern in DOCUMENT_GLOBS:
        found.update(p for p in root.glob(pattern) if ".venv" not in p.parts)
    return sorted(found)


def parse(text: str, path: str) -> list[Block]:
    """Every fenced block of one Markdown document, with the marker above it if any."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        end = index + 1
        while end < len(lines) and lines[end].strip() != fence:
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        marker = _marker_above(lines, index)
        blocks.append(
            Block(
                path=path,
                line=index + 1,
                language=_language(opening["info"]),
                text="\n".join(body) + "\n",
                marker=marker,
                options=_options(marker),
            )
        )
        index = end + 1
    return blocks


def _language(info: str) -> str:
    word = info.strip().split(" ")[0].lower()
    return _ALIASES.get(word, word)


def _marker_above(lines: list[str], index: int) -> str | None:
    previous = index - 1
    while previous >= 0 and not lines[previous].strip():
        previous -= 1
    if previous < 0:
        return None
    found = _MARKER.match(lines[previous])
    return found["body"] if found else None


def _options(marker: str | None) -> dict[str, str]:
    if marker is None or not marker.startswith("run"):
        return {}
    options: dict[str, str] = {}
    for word in shlex.split(marker)[1:]:
        key, sep, value = word.partition("=")
        if not sep or key not in KNOWN_OPTIONS:
            raise ValueError(f"unknown docs-test option {word!r} in <!-- docs-test: {marker} -->")
        options[key] = value
    return options


def all_blocks(root: Path = ROOT) -> list[Block]:
    blocks: list[Block] = []
    for document in documents(root):
        blocks.extend(parse(document.read_text(), str(document.relative_to(root))))
    return blocks


def problems(block: Block) -> list[str]:
    """Why a block is neither run nor marked with a reason (empty when it is fine)."""
    if block.marker is None:
        if block.language in RUN_BY_DEFAULT:
            return []
        return [
            f"{block.id}: a {block.language or 'plain'} block with no marker: add "
            "<!-- docs-test: run --> (and make it run) or <!-- docs-test: skip REASON -->"
        ]
    head = block.marker.split()[0] if block.marker.split() else ""
    if head == "skip":
        return [] if block.skip_reason else [f"{block.id}: skip without a reason"]
    if head == "run":
        if block.language not in {"python", "yaml", "sh"}:
            return [f"{block.id}: cannot run a {block.language or 'plain'} block"]
        return []
    return [f"{block.id}: unknown marker <!-- docs-test: {block.marker} -->"]

"""Every link in the docs resolves, and every section the prose names exists.

Each Markdown file a reader is given (found by a glob over the repository, leaving out
virtualenvs, caches and build folders) is parsed with markdown-it-py, the CommonMark parser
rich already brings (tables on, as GitHub renders them), so that code blocks and code spans
are never taken for links. Then:

- a relative link or image (``docs/x.md``, ``../LICENSE``, ``/docs/x.md`` from the
  repository's root) names a file or folder that exists, inside the repository;
- a fragment (``#name`` or ``x.md#name``) names a heading of the target by GitHub's slug
  (lower case; punctuation but ``-`` and ``_`` dropped; each space a ``-``; a repeated
  heading gets ``-1``, ``-2``...) or an HTML ``id``/``name`` there; ``#L10`` or
  ``#L10-L20`` on another file names lines it has;
- an ``http(s)`` link is well formed (a scheme and a host; nothing is fetched), a
  ``mailto:`` names an address, and no other scheme is used;
- a reference link ``[text][name]`` has its definition;
- a section named in prose, as these docs name one, exists: ``docs/x.md``, "Title" (a
  path from the repository's root), README, "Title" (the repository's README), "Title"
  below/above and section "Title" (the same file). The title is the heading, or its
  short form: the heading without a trailing parenthesis, or up to its first colon.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

from .blocks import ROOT
from .blocks import documents as documents_with_blocks

# Folders that hold no document of ours: virtualenvs, caches, build output.
SKIPPED_FOLDERS = frozenset({"node_modules", "build", "dist", "__pycache__", "site-packages"})
# Documents that must be among those found (the glob finding nothing is no pass).
EXPECTED = (
    "README.md",
    "CHANGELOG.md",
    "client/README.md",
    "plugin/README.md",
    "server/README.md",
    "devcluster/README.md",
    "docs/client.md",
    "docs/index.md",
    "docs/install.md",
    "docs/scaling.md",
    "docs/glossary.md",
    "docs/measurements/index.md",
    "charts/trainjob-status/README.md",
    "manifests/prometheus/README.md",
)

_PARSER = MarkdownIt("commonmark").enable("table")


def documents(root: Path = ROOT) -> list[Path]:
    """Every Markdown file under ``root`` but those in hidden, cache and build folders."""
    return sorted(
        path
        for path in root.rglob("*.md")
        if not any(
            part.startswith(".") or part in SKIPPED_FOLDERS or part.endswith(".egg-info")
            for part in path.relative_to(root).parts[:-1]
        )
    )


# -- what a document holds -------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    line: int  # 1-based
    target: str  # as markdown-it normalises it (non-ASCII and spaces percent-escaped)


@dataclass(frozen=True)
class Reference:
    """A section named in prose."""

    line: int
    path: str | None  # from the repository's root; None for the same file
    title: str
    where: str  # "below", "above" or "" (anywhere)


@dataclass(frozen=True)
class Heading:
    line: int
    text: str
    slug: str


def slugify(text: str) -> str:
    """GitHub's anchor for a heading's text (github-slugger, less the repeats' suffix)."""
    kept = (
        c
        for c in text.lower()
        if c in " -_" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"
    )
    return "".join(kept).replace(" ", "-")


def _plain(children: list[Token]) -> str:
    """An inline token's prose, one line a line (code spans but a path left out)."""
    parts: list[str] = []
    for child in children:
        if child.type == "text":
            parts.append(child.content)
        elif child.type == "code_inline":
            # Only a path in backticks is prose (`docs/x.md`, "Title"); other code is not.
            path = re.fullmatch(r"[\w./-]+\.md", child.content)
            parts.append(f"`{child.content}`" if path else "`...`")
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
    return "".join(parts)


class _Html(HTMLParser):
    """The anchors (``id``, ``name``) and targets (``href``, ``src``) of raw HTML."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[str] = []
        self.targets: list[tuple[int, str]] = []  # (line within the fragment, target)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.anchors.append(value)
            elif (tag, name) in (("a", "href"), ("img", "src")):
                self.targets.append((self.getpos()[0], value))


def _html(text: str) -> _Html:
    parser = _Html()
    parser.feed(text)
    parser.close()
    return parser


_QUOTED = r"[\"“](?P<title>[^\"“”\n]+(?:\n[^\"“”\n]+)*)[\"”]"
_PROSE = (
    # `docs/x.md`, "Title" (or without the backticks)
    re.compile(rf"`?(?P<path>[\w./-]+\.md)`?,\s+{_QUOTED}"),
    # README, "Title": the repository's README
    re.compile(rf"(?<![\w/.`-])(?P<readme>README),\s+{_QUOTED}"),
    # "Title" below / above / section "Title": this file
    re.compile(rf"{_QUOTED}\s+(?P<where>below|above)\b"),
    re.compile(rf"\bsection\s+{_QUOTED}"),
)


@dataclass(frozen=True)
class Document:
    headings: tuple[Heading, ...]
    anchors: frozenset[str]  # headings' slugs and HTML ids
    links: tuple[Link, ...]
    references: tuple[Reference, ...]
    undefined: tuple[Link, ...]  # [text][name] with no definition of name


def read(text: str) -> Document:
    tokens = _PARSER.parse(text)
    headings: list[Heading] = []
    anchors: set[str] = set()
    links: list[Link] = []
    references: list[Reference] = []
    undefined: list[Link] = []
    seen: dict[str, int] = {}
    for index, token in enumerate(tokens):
        start = token.map[0] + 1 if token.map else 1
        if token.type == "heading_open":
            inline = tokens[index + 1]
            words = "".join(
                c.content for c in inline.children or [] if c.type in ("text", "code_inline")
            )
            headings.append(Heading(start, words, _unique(slugify(words), seen)))
        elif token.type == "html_block":
            found = _html(token.content)
            anchors.update(found.anchors)
            links.extend(Link(start + offset - 1, target) for offset, target in found.targets)
        elif token.type == "inline":
            children = token.children or []
            links.extend(_links(children, start))
            anchors.update(
                a for c in children if c.type == "html_inline" for a in _html(c.content).anchors
            )
            plain = _plain(children)
            references.extend(_references(plain, start))
            undefined.extend(
                Link(start + plain.count("\n", 0, m.start()), m.group())
                for m in re.finditer(r"\[[^\]\n]+\]\[[^\]\n]*\]", plain)
            )
    anchors.update(h.slug for h in headings)
    return Document(
        tuple(headings), frozenset(anchors), tuple(links), tuple(references), tuple(undefined)
    )


def _unique(slug: str, seen: dict[str, int]) -> str:
    """github-slugger's rule for repeats: ``x``, ``x-1``, ``x-2``..."""
    result = slug
    while result in seen:
        seen[slug] += 1
        result = f"{slug}-{seen[slug]}"
    seen[result] = 0
    return result


def _links(children: list[Token], line: int) -> Iterator[Link]:
    for child in children:
        if child.type in ("softbreak", "hardbreak"):
            line += 1
        elif child.type == "link_open":
            yield Link(line, str(child.attrGet("href") or ""))
        elif child.type == "image":
            yield Link(line, str(child.attrGet("src") or ""))
        elif child.type == "html_inline":
            yield from (Link(line, target) for _, target in _html(child.content).targets)


def _references(plain: str, line: int) -> Iterator[Reference]:
    for pattern in _PROSE:
        for match in pattern.finditer(plain):
            groups = match.groupdict()
            if groups.get("readme"):
                path: str | None = "README.md"
            else:
                path = groups.get("path")
            yield Reference(
                line=line + plain.count("\n", 0, match.start()),
                path=path,
                title=" ".join(match["title"].split()),
                where=groups.get("where") or "",
            )


@cache
def _document(path: Path) -> Document:
    return read(path.read_text())


# -- what is broken --------------------------------------------------------------------------


def broken(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: target: why`` for each link and prose reference of ``path`` that does
    not resolve."""
    document = _document(path)
    name = path.relative_to(root).as_posix()
    found = [
        f"{name}:{link.line}: {link.target}: {why}"
        for link in document.links
        if (why := _link_problem(link, path, root))
    ]
    found += [
        f"{name}:{link.line}: {link.target}: no such reference definition"
        for link in document.undefined
    ]
    for reference in document.references:
        why = _reference_problem(reference, path, root)
        if why:
            shown = (
                f'{reference.path}, "{reference.title}"'
                if reference.path
                else f'"{reference.title}"'
            )
            found.append(f"{name}:{reference.line}: {shown}: {why}")
    return found


def _link_problem(link: Link, path: Path, root: Path) -> str | None:
    target = link.target
    if not target.strip():
        return "an empty target"
    parts = urlsplit(target)
    if parts.scheme or target.startswith("//"):
        return _external_problem(target)
    fragment = unquote(parts.fragment)
    if not parts.path:  # #fragment: this file
        return _fragment_problem(fragment, path)
    relative = unquote(parts.path)
    base = root if relative.startswith("/") else path.parent
    resolved = (base / relative.lstrip("/")).resolve()
    if not resolved.is_relative_to(root.resolve()):
        return "outside the repository"
    if not resolved.exists():
        return "no such file or folder"
    if parts.fragment:
        return _fragment_problem(fragment, resolved)
    return None


def _external_problem(target: str) -> str | None:
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        host = parts.hostname or ""
        try:
            parts.port  # noqa: B018  # raises on a port that is not a number
        except ValueError:
            return "not a well-formed URL (port)"
        if not re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+)+|localhost|\[[0-9a-f:.]+\]", host):
            return "not a well-formed URL (host)"
        if re.search(r"\s", target):
            return "not a well-formed URL (white space)"
        return None
    if parts.scheme == "mailto":
        return None if re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", parts.path) else "not an address"
    return f"a {parts.scheme or 'scheme-relative'} link (http, https and mailto only)"


def _fragment_problem(fragment: str, target: Path) -> str | None:
    if target.is_dir():  # GitHub shows a folder's README under it
        target = target / "README.md"
        if not target.is_file():
            return "a fragment on a folder without a README.md"
    if target.suffix == ".md":
        if fragment in _document(target).anchors:
            return None
        return f"no heading or anchor #{fragment} in {target.name}"
    lines = re.fullmatch(r"L(\d+)(?:-L(\d+))?", fragment)
    if lines is None:
        return f"a fragment #{fragment} on a file that is not Markdown"
    count = len(target.read_text().splitlines())
    if not all(1 <= int(n) <= count for n in lines.groups() if n is not None):
        return f"{target.name} has {count} lines"
    return None


def _reference_problem(reference: Reference, path: Path, root: Path) -> str | None:
    if reference.path is None:
        target = path
    else:
        target = root / reference.path
        if not target.is_file():
            return "no such file"
    slug = slugify(reference.title)
    matching = [h for h in _document(target).headings if slug in _short_slugs(h.text)]
    if not matching:
        return f"no such section in {target.relative_to(root).as_posix()}"
    if reference.where == "below" and not any(h.line > reference.line for h in matching):
        return "the section is above, not below"
    if reference.where == "above" and not any(h.line < reference.line for h in matching):
        return "the section is below, not above"
    return None


def _short_slugs(heading: str) -> set[str]:
    """A heading's slug, and those of its short forms (no trailing parenthesis; up to its
    first colon)."""
    return {
        slugify(heading),
        slugify(re.sub(r"\s*\([^()]*\)\s*$", "", heading)),
        slugify(heading.split(":", 1)[0]),
    }


# -- the tests -------------------------------------------------------------------------------


def test_every_document_is_found() -> None:
    found = {p.relative_to(ROOT).as_posix() for p in documents()}
    assert set(EXPECTED) <= found, sorted(set(EXPECTED) - found)
    # The documents whose code blocks run are checked here too.
    assert {p.relative_to(ROOT).as_posix() for p in documents_with_blocks()} <= found


def test_every_link_and_section_reference_resolves() -> None:
    found = [problem for path in documents() for problem in broken(path)]
    assert found == [], "\n".join(found)


def test_what_counts_as_broken(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "LICENSE").write_text("one\ntwo\n")
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Set-up: the `first` step\n\n## Set-up: the `first` step\n\n"
        '## Rolling updates (no alert)\n\n<a id="custom"></a>\n'
    )
    (tmp_path / "README.md").write_text(
        "# Top\n"
        "\n"
        "[ok](docs/guide.md) [ok](docs/guide.md#set-up-the-first-step-1) [ok](#top)\n"
        "[ok](docs/) [ok](/LICENSE#L2) [ok](docs/guide.md#custom) ![ok](docs/guide.md)\n"
        "[ok](https://example.com/a?b=c#d) [ok](mailto:someone@example.com)\n"
        "[missing](docs/nothing.md) [anchor](docs/guide.md#set-up-the-first-step-2)\n"
        "[self](#nowhere) [line](LICENSE#L3) [out](../elsewhere.md)\n"
        "[host](https://exa_mple/x) [scheme](ftp://example.com/) [ref][undefined]\n"
        '`[code](not/checked.md)` and `docs/guide.md, "Not checked" [a][b]` in code\n'
        "\n"
        "```md\n[fenced](not/checked.md)\n```\n"
        "\n"
        'See `docs/guide.md`, "Set-up", docs/guide.md, "Rolling updates" and\n'
        'README, "Top"; "Later" below, section "Later". Broken: docs/guide.md,\n'
        '"Teardown", "Top" below, "Later" above.\n'
        "\n"
        "## Later\n"
    )
    assert broken(tmp_path / "README.md", tmp_path) == [
        "README.md:6: docs/nothing.md: no such file or folder",
        "README.md:6: docs/guide.md#set-up-the-first-step-2: no heading or anchor "
        "#set-up-the-first-step-2 in guide.md",
        "README.md:7: #nowhere: no heading or anchor #nowhere in README.md",
        "README.md:7: LICENSE#L3: LICENSE has 2 lines",
        "README.md:7: ../elsewhere.md: outside the repository",
        "README.md:8: https://exa_mple/x: not a well-formed URL (host)",
        "README.md:8: ftp://example.com/: a ftp link (http, https and mailto only)",
        "README.md:8: [ref][undefined]: no such reference definition",
        'README.md:16: docs/guide.md, "Teardown": no such section in docs/guide.md',
        'README.md:17: "Top": the section is above, not below',
        'README.md:17: "Later": the section is below, not above',
    ]


def test_slugs_follow_github() -> None:
    assert slugify("The development cluster (devcluster)") == "the-development-cluster-devcluster"
    assert (
        slugify("Permissions (manifests/base/rbac.yaml, x)")
        == "permissions-manifestsbaserbacyaml-x"
    )
    assert slugify("Over budget: the right updates first") == "over-budget-the-right-updates-first"
    assert slugify("A — b_c") == "a--b_c"
    seen: dict[str, int] = {}
    assert [_unique(s, seen) for s in ("a", "a", "a-1", "a")] == ["a", "a-1", "a-1-1", "a-2"]

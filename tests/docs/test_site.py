"""The documentation site builds with ``mkdocs build --strict`` (any warning fails it: a
broken link or anchor, a page left out of the navigation), every page of its navigation
is built, and the two pages with a length budget keep to it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from .blocks import ROOT

CONFIG = ROOT / "mkdocs.yml"
DOCS = ROOT / "docs"
# How long each page may be, in lines: the README is the way in, the sizing page states
# current figures (the runs behind them are kept under docs/measurements/).
LINE_BUDGETS = {"README.md": 250, "docs/scaling.md": 300}


class _ConfigLoader(yaml.SafeLoader):
    """mkdocs.yml's YAML, its ``!!python/...`` tags read as nothing (only the nav is used)."""


def _python_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> None:
    return None


_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/", _python_tag)


def _config() -> dict[str, Any]:
    config = yaml.load(CONFIG.read_text(), Loader=_ConfigLoader)
    assert isinstance(config, dict)
    return config


def _pages(nav: Any) -> Iterator[str]:
    """The Markdown files the navigation names, relative to docs/."""
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from _pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _pages(value)


def nav_pages() -> list[str]:
    return list(_pages(_config()["nav"]))


def built_file(site: Path, page: str) -> Path:
    """Where MkDocs writes a page with directory URLs (its default)."""
    path = Path(page).with_suffix("")
    if path.name == "index":
        return site / path.parent / "index.html"
    return site / path / "index.html"


def test_every_page_under_docs_is_in_the_navigation_once() -> None:
    pages = nav_pages()
    assert len(pages) == len(set(pages)), sorted(p for p in pages if pages.count(p) > 1)
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert set(pages) == on_disk, (sorted(on_disk - set(pages)), sorted(set(pages) - on_disk))
    assert pages[0] == "index.md"


def test_the_site_builds_strictly_with_every_page(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    missing = [page for page in nav_pages() if not built_file(site, page).is_file()]
    assert missing == [], missing


def test_the_pages_with_a_line_budget_keep_to_it() -> None:
    over = {
        name: count
        for name, limit in LINE_BUDGETS.items()
        if (count := len((ROOT / name).read_text().splitlines())) > limit
    }
    assert over == {}, f"lines over budget {LINE_BUDGETS}: {over}"


def test_built_file_follows_directory_urls() -> None:
    site = Path("/site")
    assert built_file(site, "index.md") == site / "index.html"
    assert built_file(site, "scaling.md") == site / "scaling" / "index.html"
    assert built_file(site, "measurements/index.md") == site / "measurements" / "index.html"
    assert built_file(site, "measurements/a.md") == site / "measurements" / "a" / "index.html"

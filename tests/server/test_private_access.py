"""No module of the server but the fence (``http/aiohttp_internals.py``) touches a private
part of aiohttp or asyncio, as far as the source shows it:

- no ``x._name`` on anything but ``self``, ``cls`` or a class of the same module;
- in a class built on a class from outside the server (aiohttp's, asyncio's), no
  ``self._name`` and no method ``_name`` that the outside class has or sets itself;
- no import of a module of aiohttp other than its public ones, nor of asyncio's
  submodules, nor of a private name from either.

The checker is tested on code that breaks each rule, so it cannot pass by seeing nothing.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import trainjob_status_server

PACKAGE = Path(trainjob_status_server.__file__).parent
FENCE = PACKAGE / "http" / "aiohttp_internals.py"
FENCED = ("aiohttp", "asyncio")
PUBLIC_MODULES = frozenset(
    {
        "aiohttp",
        "aiohttp.web",
        "aiohttp.hdrs",
        "aiohttp.abc",
        "aiohttp.streams",
        "aiohttp.http",
        "aiohttp.http_exceptions",
        "asyncio",
    }
)
OURS = ("trainjob_status", "trainjob_status_server")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _fenced(module: str) -> bool:
    return module.split(".")[0] in FENCED


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _outside_privates(cls: type) -> set[str]:
    """The private names the classes of ``cls``'s bases from outside the server have:
    in their dictionaries and slots, and set on ``self`` in their source."""
    names: set[str] = set()
    for base in cls.__mro__[1:]:
        if base.__module__.split(".")[0] in OURS or base is object:
            continue
        names.update(name for name in vars(base) if _private(name))
        slots = vars(base).get("__slots__", ())
        names.update(s for s in ([slots] if isinstance(slots, str) else slots) if _private(s))
        try:
            source = textwrap.dedent(inspect.getsource(base))
        except (OSError, TypeError):
            continue
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and _private(node.attr)
            ):
                names.add(node.attr)
    return names


def violations(source: str, module: object | None) -> Iterator[str]:
    """What in ``source`` (the text of ``module``, imported) breaks the rules above."""
    tree = ast.parse(source)
    own_classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _fenced(alias.name) and alias.name not in PUBLIC_MODULES:
                    yield f"line {node.lineno}: imports {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and _fenced(node.module):
            if node.module not in PUBLIC_MODULES:
                yield f"line {node.lineno}: imports from {node.module}"
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _private(alias.name) or (full not in PUBLIC_MODULES and _is_module(full)):
                    yield f"line {node.lineno}: imports {full}"
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in {"self", "cls", *own_classes}):
                yield f"line {node.lineno}: {ast.unparse(node)}"
        elif isinstance(node, ast.ClassDef) and module is not None:
            cls = getattr(module, node.name, None)
            if not isinstance(cls, type):
                continue
            theirs = _outside_privates(cls)
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id in {"self", "cls"}
                    and inner.attr in theirs
                ):
                    yield f"line {inner.lineno}: {node.name} uses {inner.attr} of its base"
                elif isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    inner.name in theirs
                ):
                    yield f"line {inner.lineno}: {node.name} overrides {inner.name} of its base"


def _modules() -> list[Path]:
    # A ``__main__`` runs its command when imported: its source is checked all the same.
    return sorted(p for p in PACKAGE.rglob("*.py") if p != FENCE)


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_access_outside_the_fence(path: Path) -> None:
    module = None if path.stem == "__main__" else importlib.import_module(_name(path))
    assert list(violations(path.read_text(), module)) == []


def test_the_fence_is_where_the_private_access_is() -> None:
    module = importlib.import_module(_name(FENCE))
    found = list(violations(FENCE.read_text(), module))
    assert any("site._server" in line for line in found)
    assert any("imports asyncio.sslproto" in line for line in found)
    assert any("ServerlessResponse overrides _prepare_headers" in line for line in found)
    assert any("RequestHandlerBase uses _parser" in line for line in found)


class _Fake:
    """Stands in for a module: the checker looks classes up on it."""


STRAYS = {
    "response._payload_writer": ("request._payload_writer", "line 1: request._payload_writer"),
    "a private module": (
        "from aiohttp.helpers import reify",
        "line 1: imports from aiohttp.helpers",
    ),
    "a private name": (
        "from asyncio import _get_running_loop",
        "imports asyncio._get_running_loop",
    ),
    "a submodule by name": ("from asyncio import sslproto", "imports asyncio.sslproto"),
    "a private module, imported": ("import aiohttp.web_protocol", "imports aiohttp.web_protocol"),
}


@pytest.mark.parametrize("case", sorted(STRAYS))
def test_the_checker_finds_each_kind_of_stray_access(case: str) -> None:
    source, expected = STRAYS[case]
    assert any(expected in line for line in violations(source, None))


def test_the_checker_finds_a_subclass_reaching_into_its_base() -> None:
    from aiohttp import web

    source = textwrap.dedent(
        """
        class Ours(web.Response):
            def _prepare_headers(self):
                return self._eof_sent

        class Fine(web.Response):
            def _ours(self):
                return self._our_own
        """
    )
    fake = _Fake()
    namespace: dict[str, object] = {"web": web}
    exec(compile(source, "<stray>", "exec"), namespace)
    fake.Ours = namespace["Ours"]  # type: ignore[attr-defined]
    fake.Fine = namespace["Fine"]  # type: ignore[attr-defined]
    found = list(violations(source, fake))
    assert found == [
        "line 3: Ours overrides _prepare_headers of its base",
        "line 4: Ours uses _eof_sent of its base",
    ]

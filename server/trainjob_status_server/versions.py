"""The aiohttp versions the server is tested with, and the start-up check against them.

The serving path relies on aiohttp internals (private attributes of its request handler,
server and response), which any minor release may change. CI runs the suite at the
floor below and at the newest release under the ceiling; server/pyproject.toml declares
the same range, so pip refuses the rest, but an environment built another way (a pinned
system package, ``--no-deps``) may still hold another: ``serve`` refuses it at start,
before the serving path is imported, rather than failing there or on a request.
"""

from __future__ import annotations

import re
from importlib import metadata

AIOHTTP_FLOOR = (3, 14, 4)
AIOHTTP_CEILING = (3, 15)
AIOHTTP_RANGE = f">={'.'.join(map(str, AIOHTTP_FLOOR))},<{'.'.join(map(str, AIOHTTP_CEILING))}"

# A PEP 440 version's release numbers and what follows them.
_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(.*)", re.IGNORECASE)
# A pre-release or development release comes before the release it names.
_BEFORE_RELEASE = re.compile(r"[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)", re.IGNORECASE)


def installed_aiohttp() -> str:
    """The version of the aiohttp distribution this interpreter would import."""
    return metadata.version("aiohttp")


def aiohttp_tested(version: str) -> bool:
    """Whether ``version`` lies in :data:`AIOHTTP_RANGE`, as pip reads a range: a
    pre-release of the floor is below it, one of the ceiling is not under it."""
    found = _VERSION.fullmatch(version.strip())
    if found is None:
        return False
    release = tuple(int(part) for part in found.group(1).split("."))
    early = _BEFORE_RELEASE.match(found.group(2).split("+")[0]) is not None
    if _padded(release) < _padded(AIOHTTP_FLOOR):
        return False
    if _padded(release) == _padded(AIOHTTP_FLOOR) and early:
        return False
    return _padded(release) < _padded(AIOHTTP_CEILING)


def untested_aiohttp_problem(version: str) -> str:
    """The one line ``serve`` refuses an untested aiohttp with."""
    return (
        f"aiohttp {version} is installed, but this server is tested with aiohttp{AIOHTTP_RANGE}"
        " only (it relies on aiohttp internals): install a version in that range, or give"
        " --allow-untested-aiohttp (env TRAINJOB_STATUS_ALLOW_UNTESTED_AIOHTTP) to run anyway"
    )


def _padded(release: tuple[int, ...]) -> tuple[int, ...]:
    # 3.15 and 3.15.0 are the same release.
    return release + (0,) * (4 - len(release))

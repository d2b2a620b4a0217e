"""Check that a lowest-direct install holds every direct dependency at its declared floor.

    python .ci/floors.py GROUP [PYPROJECT ...]

GROUP is a dependency group of the root pyproject.toml; each PYPROJECT adds its
[project] dependencies. A requirement whose floor (``>=``) is not what got installed,
because another package needs more, has a floor CI does not run: raise it to the
installed version. Run with the interpreter of the virtualenv to check (`make
test-lowest`).
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # the client's leg, Python 3.9: pytest brings tomli there
    import tomli as tomllib


def declared(group: str, pyprojects: list[str]) -> list[Requirement]:
    root = tomllib.loads(Path("pyproject.toml").read_text())
    lines = [r for r in root["dependency-groups"][group] if isinstance(r, str)]
    for path in pyprojects:
        lines += tomllib.loads(Path(path).read_text())["project"]["dependencies"]
    return [Requirement(line) for line in lines]


def main(group: str, *pyprojects: str) -> int:
    wrong = []
    for requirement in declared(group, list(pyprojects)):
        floors = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        if not floors or (requirement.marker and not requirement.marker.evaluate()):
            continue
        installed = Version(metadata.version(requirement.name))
        if installed != max(floors):
            wrong.append(f"{requirement}: {installed} installed")
    for line in wrong:
        print(f"floor not run: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

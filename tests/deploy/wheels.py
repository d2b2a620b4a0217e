"""Reading a built wheel as a user's pip would see it (helpers, no tests), and what must
never reach the server's install."""

from __future__ import annotations

import configparser
import re
import zipfile
from dataclasses import dataclass
from email.parser import BytesParser
from pathlib import Path

# The development cluster's package and the dependencies only it or the test tools use
# (multidict is not here: aiohttp needs it too).
DEVELOPMENT_ONLY = {"trainjob-devcluster", "httptools", "orjson", "uvloop"}


@dataclass(frozen=True)
class Wheel:
    names: list[str]  # the files it installs, its .dist-info left out
    requires: list[str]  # Requires-Dist, as written
    requires_python: str
    scripts: dict[str, str]  # console scripts: name -> entry point
    license_expression: str | None
    license_files: dict[str, bytes]  # License-File name -> its bytes in .dist-info/licenses

    @property
    def top_level(self) -> set[str]:
        return {name.split("/")[0] for name in self.names}

    @property
    def required(self) -> set[str]:
        """The names of the distributions it requires, lower-case."""
        return {re.split(r"[\s\[<>=!;~(]", r, maxsplit=1)[0].lower() for r in self.requires}


def read_wheel(path: Path) -> Wheel:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        metadata = BytesParser().parsebytes(archive.read(f"{info}/METADATA"))
        points = configparser.ConfigParser()
        if f"{info}/entry_points.txt" in names:
            points.read_string(archive.read(f"{info}/entry_points.txt").decode())
        license_files = {
            name: archive.read(f"{info}/licenses/{name}")
            for name in metadata.get_all("License-File") or []
        }
    scripts = dict(points["console_scripts"]) if points.has_section("console_scripts") else {}
    return Wheel(
        names=[n for n in names if not n.startswith(info)],
        requires=metadata.get_all("Requires-Dist") or [],
        requires_python=metadata["Requires-Python"],
        scripts=scripts,
        license_expression=metadata["License-Expression"],
        license_files=license_files,
    )


def distribution_name(file_name: str) -> str:
    """The distribution a wheel or .dist-info name belongs to, as pip normalises it."""
    return file_name.split("-")[0].replace("_", "-").lower()

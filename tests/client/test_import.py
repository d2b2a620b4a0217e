"""``import trainjob_status`` in a training script loads no ``importlib.metadata``: the
version is read from the distribution's metadata only when ``__version__`` is asked for
(``bench/client_import.py`` measures what that saves)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "client" / "pyproject.toml"


def written_version() -> str:
    """The version where it is written: client/pyproject.toml's [project] table (what pip
    installs); read without tomllib, which Python 3.9 lacks."""
    project = PYPROJECT.read_text(encoding="utf-8").split("\n[project]\n", 1)[1]
    found = re.search(r'^version = "([^"]+)"$', project.split("\n[", 1)[0], re.MULTILINE)
    assert found is not None, f"no version in {PYPROJECT}'s [project] table"
    return found.group(1)


LOADED_BY = """
import json, sys
before = set(sys.modules)
import trainjob_status
after_import = set(sys.modules)
version = trainjob_status.__version__
print(json.dumps({
    "by_import": sorted(after_import - before),
    "by_version": sorted(set(sys.modules) - after_import),
    "version": version,
    "preloaded": "importlib.metadata" in before,
}))
"""


def test_import_loads_no_metadata_until_the_version_is_read() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOADED_BY], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(done.stdout)
    assert "trainjob_status.reporter" in loaded["by_import"]
    assert "importlib.metadata" not in loaded["by_import"]
    # Unless the interpreter's start-up had loaded it already (then neither loads it).
    assert loaded["preloaded"] or "importlib.metadata" in loaded["by_version"]
    assert loaded["version"] == written_version()


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    import trainjob_status

    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        trainjob_status.nope  # noqa: B018
    # The one name it does resolve, read from the installed distribution's metadata.
    assert trainjob_status.__version__ == written_version()

"""The license ships with everything that is distributed: one Apache-2.0 text at the
root, the same bytes in each distribution's folder (a wheel takes its own folder's), in
the chart and in the krew archive (``tests/kubectl_plugin/test_krew.py``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The Apache License 2.0 as the Apache Software Foundation publishes it.
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_root_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_SHA256
    assert b"Apache License\n                           Version 2.0, January 2004" in text


@pytest.mark.parametrize(
    "folder", ["client", "server", "plugin", "devcluster", "charts/trainjob-status"]
)
def test_each_distribution_carries_the_same_license(folder: str) -> None:
    assert (ROOT / folder / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()

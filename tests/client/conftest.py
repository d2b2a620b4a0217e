"""Fixtures for client tests: the local sink and reporters aimed at it.

These tests need the client and pytest only (they also run on Python 3.9, see the
Makefile's ``client-py39``); tests of the client against our server live in
``tests/client_with_server``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainjob_status import StatusReporter

from .sink import Sink


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Sink]:
    running = Sink(tmp_path)
    yield running
    running.close()


MakeReporter = Callable[..., StatusReporter]


@pytest.fixture
def make_reporter(sink: Sink) -> Iterator[MakeReporter]:
    """Reporters aimed at the sink (its URL, token and CA files), closed after the test.
    ``environ`` is empty unless given, so the test machine's RANK cannot interfere."""
    made: list[StatusReporter] = []

    def make(**options: Any) -> StatusReporter:
        options.setdefault("url", sink.url())
        options.setdefault("token_path", str(sink.token_file))
        options.setdefault("ca_path", str(sink.ca_file))
        options.setdefault("environ", {})
        reporter = StatusReporter(**options)
        made.append(reporter)
        return reporter

    yield make
    for reporter in made:
        reporter.close(timeout=0)

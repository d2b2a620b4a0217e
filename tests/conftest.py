"""Fixtures for the whole suite: the development cluster, and our loggers at DEBUG.

Every log call of ours runs during the suite with its arguments formatted the way the
server writes them (JSON and key=value): an ``extra`` key that clashes with a LogRecord
attribute, a ``%`` argument that does not fit, or a field JSON cannot encode fails the
test that reaches it instead of a deployment at a level the tests never ran.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from hypothesis import settings

from trainjob_status_server.logs import JsonFormatter, KeyValueFormatter

pytest_plugins = ["trainjob_devcluster.harness.pytest_plugin"]

# Hypothesis fails an example that takes over 200 ms: a timing assertion, which a loaded
# CI machine trips at random (speed is measured in bench/, not asserted here).
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")

PROJECT_LOGGERS = ("trainjob_status", "trainjob_status_server")


class FormatEveryRecord(logging.Handler):
    """Formats each record in both of the server's formats and drops the text. It does
    not catch what formatting raises: the log call that made the record fails."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.formats = (JsonFormatter(), KeyValueFormatter())

    def handle(self, record: logging.LogRecord) -> bool:
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        for formatter in self.formats:
            formatter.format(record)


@pytest.fixture(autouse=True, scope="session")
def _project_loggers_at_debug() -> Iterator[None]:
    handler = FormatEveryRecord()
    saved = []
    for name in PROJECT_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    yield
    for logger, level in saved:
        logger.removeHandler(handler)
        logger.setLevel(level)

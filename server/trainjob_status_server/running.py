"""``serve``: run the server until SIGTERM or SIGINT, then shut down within a deadline."""

from __future__ import annotations

import asyncio
import logging
import signal

from .app import StatusServer
from .auth import Authenticator, TokenAuthenticator
from .config import Config

log = logging.getLogger(__name__)

CLOSE_GRACE = 5.0
"""Beyond the in-flight and drain deadlines: closing the watches, the API client and the
listeners."""


def shutdown_deadline(config: Config) -> float:
    """Seconds from SIGTERM to exit at most: the status port's delay and in-flight
    requests beside the drain, then the rest closes. A pod's
    ``terminationGracePeriodSeconds`` must be at least this, or the kubelet's SIGKILL
    cuts the drain."""
    serving = config.shutdown_delay + config.shutdown_timeout
    return max(serving, config.drain_timeout) + CLOSE_GRACE


async def serve_until_signalled(config: Config, authenticator: Authenticator | None = None) -> int:
    """0 after a clean shutdown, 1 if the server could not start or stop in time.

    Without an ``authenticator``, tokens are verified as ``config`` says."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = StatusServer(config, authenticator or TokenAuthenticator(config.auth_settings()))
    try:
        await server.start()
    except OSError as exc:
        log.error("cannot start", extra={"error": str(exc)})
        await server.stop()
        return 1
    await stop.wait()
    log.info(
        "shutting down",
        extra={
            "delay_s": config.shutdown_delay,
            "in_flight_s": config.shutdown_timeout,
            "drain_s": config.drain_timeout,
        },
    )
    try:
        async with asyncio.timeout(shutdown_deadline(config)):
            await server.stop()
    except TimeoutError:
        log.error("shutdown did not finish in time")
        return 1
    return 0

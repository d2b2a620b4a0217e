"""``trainjob-devcluster serve``: serve until interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from .cluster import DevCluster
from .kubeconfig import write_kubeconfig

# The store keeps every object version of its watch window (10,000 events) alive, so with
# the collector's default thresholds a steady write load makes it walk them again and
# again (a full collection takes a tenth of a second or more on a busy cluster). Young
# collections every 10,000 allocations instead of 700 make the older ones rare.
GC_THRESHOLDS = (10_000, 20, 20)


def main(port: int, kubeconfig_out: Path) -> None:
    """Serve on uvloop where it is installed (its transports and TLS are C: about half
    the CPU per request of asyncio's), else on asyncio's loop."""
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    with (
        contextlib.suppress(KeyboardInterrupt),
        asyncio.Runner(loop_factory=loop_factory) as runner,
    ):
        runner.run(run(port, kubeconfig_out))


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


async def run(port: int, kubeconfig_out: Path) -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    kubeconfig_out = await asyncio.to_thread(kubeconfig_out.resolve)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with DevCluster(port=port) as cluster:
        # What was built to start (modules, the compiled CRD) is never collected again.
        gc.freeze()
        # Written only now: whoever polls for the file can use it at once.
        write_kubeconfig(kubeconfig_out, cluster.url, cluster.ca.cert_pem, cluster.admin_token)
        print(
            f"devcluster serving {cluster.url} on {loop_name(loop)} (development only); "
            f"kubeconfig: {kubeconfig_out}; Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        try:
            await stop.wait()
        finally:
            await asyncio.to_thread(kubeconfig_out.unlink, missing_ok=True)

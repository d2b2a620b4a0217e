"""``trainjob-status-server devcluster``: serve until interrupted."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from pathlib import Path

from .cluster import DevCluster
from .kubeconfig import write_kubeconfig

# The store keeps every object version of its watch window (10,000 events) alive, so with
# the collector's default thresholds a steady write load makes it walk them again and
# again (a full collection takes a tenth of a second or more on a busy cluster). Young
# collections every 10,000 allocations instead of 700 make the older ones rare.
GC_THRESHOLDS = (10_000, 20, 20)


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
            f"devcluster serving {cluster.url} (development only); "
            f"kubeconfig: {kubeconfig_out}; Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        try:
            await stop.wait()
        finally:
            await asyncio.to_thread(kubeconfig_out.unlink, missing_ok=True)

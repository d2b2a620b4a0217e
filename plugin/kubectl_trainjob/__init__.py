"""``kubectl trainjob``: TrainJob progress in a terminal, as a kubectl plugin.

kubectl runs any executable named ``kubectl-trainjob`` on PATH for ``kubectl trainjob``;
this package is that executable (console script, or ``python -m``). It reads TrainJobs
through the Kubernetes API with the user's kubeconfig (``KUBECONFIG`` or
``~/.kube/config``, ``--kubeconfig``, ``--context``), as kubectl would:

    kubectl trainjob progress [NAME ...] [-n NS | -A] [-l SELECTOR] [-w] [--metric NAME ...]
        [--sort-by KEY] [-o wide|json|yaml]

The table shows the state the TrainJob's controller set, a progress bar, the ETA, the
age of the last update and metrics (the first few reported, or those chosen); ``-o
wide`` adds the runtime and every metric. The figures are the TrainJob's
``status.trainerStatus``, or the newest update the status server accepted when it is
later, where the server's aggregated API (``trainjobprogresses``) is registered: it
writes a TrainJob's status at most so often. Without that API the status is all there
is; when it cannot be read, stderr says why once and the rows show the status. ``-w``
redraws it on every watch event and every change of those updates, read every few
seconds (in place on a terminal, once more per change when piped); when the API server
stops answering, the reason goes to stderr once, the rows are marked stale, and a fresh
list clears the mark as soon as it answers again. ``-o json|yaml`` prints the same
figures for scripts (with ``-w``, one document per change). The figures are formatted
by pure functions; the I/O is the follower, the progress reads and a small Kubernetes
client of the package's own on kubernetes-asyncio: the plugin installs without the
status server.

Modules: ``rows`` (the figures of one TrainJob, their formatting and order, pure),
``formats`` (durations, numbers and stamps as the server writes and reads them, pure),
``terminal`` (cluster strings made safe to print, pure), ``output`` (table, JSON, YAML;
redraws; messages), ``follow`` (list, watch, relist, and whether the rows are current),
``fresh`` (the newest updates from the aggregated API, and what to say when it cannot be
read), ``kube`` (the kubeconfig, a list, a watch, a GET; what a failure says),
``command`` (flags, the kubeconfig's file), ``version``.
"""

from .command import build_parser, main
from .version import __version__

__all__ = ["__version__", "build_parser", "main"]

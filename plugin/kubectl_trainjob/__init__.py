"""``kubectl trainjob``: TrainJob progress in a terminal, as a kubectl plugin.

kubectl runs any executable named ``kubectl-trainjob`` on PATH for ``kubectl trainjob``;
this package is that executable (console script, or ``python -m``). It reads TrainJobs
through the Kubernetes API with the user's kubeconfig (``KUBECONFIG`` or
``~/.kube/config``, ``--kubeconfig``, ``--context``), as kubectl would:

    kubectl trainjob progress [NAME ...] [-n NS | -A] [-l SELECTOR] [-w] [--metric NAME ...]
        [--sort-by KEY] [-o wide|json|yaml]

The table shows the state the TrainJob's controller set, a progress bar, the ETA, the
age of the last update and metrics (the first few reported, or those chosen); ``-o
wide`` adds the runtime and every metric. ``-w`` redraws it on every watch event (in
place on a terminal, once more per change when piped); when the API server stops
answering, the reason goes to stderr once, the rows are marked stale, and a fresh list
clears the mark as soon as it answers again. ``-o json|yaml`` prints the same figures
for scripts (with ``-w``, one document per change). The figures are formatted by pure
functions; the I/O is the follower and the server's KubeClient (``trainjob_status_server.kube``,
the one Kubernetes client of the project), which this package drives.

Modules: ``rows`` (the figures of one TrainJob, their formatting and order, pure),
``terminal`` (cluster strings made safe to print, pure), ``output`` (table, JSON, YAML;
redraws; messages), ``follow`` (list, watch, relist, and whether the rows are current),
``command`` (flags, kubeconfig), ``version``.
"""

from .command import build_parser, main
from .version import __version__

__all__ = ["__version__", "build_parser", "main"]

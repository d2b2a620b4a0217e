"""``kubectl trainjob``: TrainJob progress in a terminal, as a kubectl plugin.

kubectl runs any executable named ``kubectl-trainjob`` on PATH for ``kubectl trainjob``;
this package is that executable (console script, or ``python -m``). It reads TrainJobs
through the Kubernetes API with the user's kubeconfig (``KUBECONFIG`` or
``~/.kube/config``, ``--kubeconfig``, ``--context``), as kubectl would:

    kubectl trainjob progress [NAME ...] [-n NS | -A] [-w] [--metric NAME ...] [-o json|yaml]

The table shows a progress bar, the ETA, the age of the last update and the chosen
metrics; ``-w`` redraws it on every watch event (in place on a terminal, once more per
change when piped); ``-o json|yaml`` prints the same figures for scripts (with ``-w``,
one document per change). The figures are formatted by pure functions; the I/O is the
shared KubeClient and WatchCache.

Modules: ``rows`` (the figures of one TrainJob and their formatting, pure), ``terminal``
(cluster strings made safe to print, pure), ``output``
(table, JSON, YAML; redraws), ``command`` (flags, kubeconfig, list and watch).
"""

from .command import build_parser, main

__all__ = ["build_parser", "main"]

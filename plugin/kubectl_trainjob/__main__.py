"""``python -m kubectl_trainjob``: what ``kubectl-trainjob`` runs."""

import sys

from .command import main

sys.exit(main())

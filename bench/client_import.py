"""What ``import trainjob_status`` costs a training script, from ``python -X importtime``:
the cumulative microseconds of the package (everything it imports included), of
``importlib.metadata`` within it, and the same once ``__version__`` is read (which loads
``importlib.metadata`` on first use). Each figure is the median of ``--runs`` fresh
interpreters. ``--against DIR`` measures another checkout's client in the same rounds
(e.g. ``git archive HEAD~1 client | tar -x -C /tmp/before``, then ``--against
/tmp/before``). Prints figures; asserts nothing.

    .venv/bin/python bench/client_import.py [--runs 30] [--against DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cumulative_us(stderr: str) -> dict[str, int]:
    """Module name -> cumulative import time in microseconds, from -X importtime's lines
    (``import time: self | cumulative | name``; nested modules are indented)."""
    found: dict[str, int] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if cumulative.isdigit():
            found[name] = int(cumulative)
    return found


def one_run(client: Path, code: str) -> dict[str, int]:
    env = {**os.environ, "PYTHONPATH": str(client)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return cumulative_us(done.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--against", type=Path, help="another checkout (its client/ is used)")
    parser.add_argument("--smoke", action="store_true", help="3 runs: checks that it runs")
    args = parser.parse_args()
    runs = 3 if args.smoke else args.runs
    clients = {"this checkout": ROOT / "client"}
    if args.against is not None:
        clients["--against"] = args.against / "client"
    cases = {
        "import trainjob_status": "import trainjob_status",
        "... and read __version__": "import trainjob_status; trainjob_status.__version__",
    }
    samples: dict[tuple[str, str], list[dict[str, int]]] = {}
    for _ in range(runs):  # interleaved, so drift hits every row alike
        for label, client in clients.items():
            for case, code in cases.items():
                samples.setdefault((label, case), []).append(one_run(client, code))
    print(f"# median of {runs} interpreters, python {sys.version.split()[0]}, -X importtime")
    for (label, case), runs_seen in samples.items():
        package = statistics.median(r.get("trainjob_status", 0) for r in runs_seen)
        metadata = statistics.median(r.get("importlib.metadata", 0) for r in runs_seen)
        loaded = sum("importlib.metadata" in r for r in runs_seen)
        print(
            f"{label:<14} {case:<26} trainjob_status {package:8,.0f} us cumulative"
            f"  importlib.metadata {metadata:8,.0f} us (loaded in {loaded}/{len(runs_seen)})"
        )


if __name__ == "__main__":
    main()

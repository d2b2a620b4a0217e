"""Every fenced code block in the docs runs as written, or says why it does not
(``blocks.py`` holds the rules and the markers)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from client_with_server.conftest import Pod, stored_status
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import require_binary
from trainjob_status.contract import ENV_NAMES

from .blocks import ROOT, Block, all_blocks, parse, problems

BLOCKS = all_blocks()
TESTS = ROOT / "tests"
KUBERNETES_VERSION = "1.32"
# How many blocks the suite runs: raise it when a block is added, never lower it to let one
# go unrun.
RUN_AT_LEAST = 14
# A block that waits on a server of its own gets this long.
BLOCK_TIMEOUT = 120


def _ids(block: Block) -> str:
    return block.id


def _of(language: str, *, pod: bool | None = None) -> list[Block]:
    found = [b for b in BLOCKS if b.language == language and b.runs]
    if pod is not None:
        found = [b for b in found if (b.options.get("env") == "pod") == pod]
    return found


def test_every_block_runs_or_says_why_not() -> None:
    assert BLOCKS, "no documentation found"
    found = [problem for block in BLOCKS for problem in problems(block)]
    assert not found, "\n".join(found)


def test_an_unmarked_shell_block_is_refused() -> None:
    text = "text\n\n```sh\nmake demo\n```\n\n<!-- docs-test: skip needs a cluster -->\n```sh\nkubectl get pods\n```\n"
    first, second = parse(text, "x.md")
    assert problems(first) == [
        "x.md:3: a sh block with no marker: add <!-- docs-test: run --> (and make it run) "
        "or <!-- docs-test: skip REASON -->"
    ]
    assert problems(second) == []
    assert second.skip_reason == "needs a cluster"


def test_a_skip_needs_a_reason_and_a_marker_must_be_known() -> None:
    text = "<!-- docs-test: skip -->\n```text\nx\n```\n<!-- docs-test: walk -->\n```sh\nx\n```\n"
    assert [p for b in parse(text, "x.md") for p in problems(b)] == [
        "x.md:2: skip without a reason",
        "x.md:6: unknown marker <!-- docs-test: walk -->",
    ]


def test_the_count_of_blocks_run() -> None:
    """Printed for the record (``pytest -s``): how many blocks run, by language."""
    run = [b for b in BLOCKS if b.runs]
    by_language: dict[str, int] = {}
    for block in run:
        by_language[block.language] = by_language.get(block.language, 0) + 1
    print(f"docs blocks: {len(BLOCKS)} in all, {len(run)} run {by_language}")
    # A block the suite runs today is not quietly marked skip tomorrow.
    assert len(run) >= RUN_AT_LEAST, [b.id for b in run]


# -- running them ----------------------------------------------------------------------------


def _environment(pod: Pod | None, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_NAMES}
    for name in ("RANK", "WORLD_SIZE", "KUBECONFIG", "DISABLE_KUBEFLOW_INTEGRATION"):
        env.pop(name, None)
    if pod is not None:
        env.update(pod.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(TESTS)
    env["HOME"] = str(scratch)
    return env


# Programs a shell block may call that are not ours: missing, the block skips (fails in CI).
EXTERNAL = ("kubectl", "curl")


def _run(block: Block, pod: Pod | None, scratch: Path) -> subprocess.CompletedProcess[str]:
    """Run one block in ``scratch`` (its own process group, ended with it)."""
    if block.language == "sh":
        for program in EXTERNAL:
            if re.search(rf"(^|[\s|;&(]){program} ", block.text, re.MULTILINE):
                require_binary(program)
    env = _environment(pod, scratch)
    if block.language == "python" and block.options.get("context") == "pytest":
        # A test as a reader would write one, run by pytest with our plugin.
        (scratch / "test_block.py").write_text(block.text)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "trainjob_devcluster.harness.pytest_plugin",
        ]
        command += ["-p", "no:cacheprovider", "-o", "asyncio_mode=auto", "test_block.py"]
    elif block.language == "python":
        (scratch / "block.py").write_text(block.text)
        context = block.options.get("context", "none")
        command = [sys.executable, "-m", "docs.contexts", context, "block.py"]
    else:
        # Blocks name the commands of the repository's virtualenv as .venv/bin/...
        (scratch / ".venv").symlink_to(sys.prefix)
        command = ["bash", "-euo", "pipefail", "-c", block.text]
    process = subprocess.Popen(
        command,
        cwd=scratch,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=BLOCK_TIMEOUT)
    finally:
        # What a block started in the background goes with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _check(block: Block, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, (
        f"{block.id} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    assert "Traceback" not in done.stderr, f"{block.id}\n{done.stderr}"
    if block.options.get("context") == "pytest":
        assert re.search(r"^1 passed", done.stdout, re.MULTILINE), f"{block.id}\n{done.stdout}"
    if block.options.get("context") == "transformers":
        # attach() and report_to="none" both leave transformers' own callback out.
        (line,) = [line for line in done.stdout.splitlines() if line.startswith("callbacks:")]
        assert "TrainJobStatusCallback" in line.split()
        assert "KubeflowCallback" not in line.split()


@pytest.mark.parametrize("block", _of("python", pod=False) + _of("sh", pod=False), ids=_ids)
def test_block_runs_outside_a_trainjob(block: Block, tmp_path: Path) -> None:
    _check(block, _run(block, None, tmp_path))


@pytest.mark.parametrize("block", _of("python", pod=True) + _of("sh", pod=True), ids=_ids)
async def test_block_runs_in_a_pod(block: Block, pod: Pod, devcluster: DevCluster) -> None:
    # The server runs on this event loop: the block runs in a thread meanwhile.
    with tempfile.TemporaryDirectory() as scratch:
        done = await asyncio.to_thread(_run, block, pod, Path(scratch))
    _check(block, done)
    if "progress" in block.options:
        status = stored_status(devcluster)
        assert status is not None, f"{block.id}: nothing stored\n{done.stderr}"
        assert status["progressPercentage"] == int(block.options["progress"])


@pytest.mark.parametrize("block", _of("python", pod=True), ids=_ids)
def test_python_block_runs_outside_a_trainjob_too(block: Block, tmp_path: Path) -> None:
    """In-pod examples are harmless where there is no TrainJob (a laptop, CI)."""
    _check(block, _run(block, None, tmp_path))


@pytest.mark.parametrize("block", _of("yaml"), ids=_ids)
def test_yaml_block_is_valid(block: Block, tmp_path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(block.text) if d is not None]
    assert documents, block.id
    for document in documents:
        if isinstance(document, dict) and {"apiVersion", "kind"} <= document.keys():
            _validate(block, document)
    if block.options.get("context") == "kustomization":
        _render_with_quick_start(block, documents, tmp_path)


def _validate(block: Block, document: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        # A custom resource or a kustomize file: Kubernetes has no schema for it.
        assert isinstance(document.get("metadata", {}), dict), block.id
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{block.id}: {exc}")


def _render_with_quick_start(block: Block, documents: list[Any], scratch: Path) -> None:
    """A kustomization fragment, added to a copy of the quick-start overlay, renders."""
    from deploy.rendering import OVERLAYS, kustomization

    kubectl = require_binary("kubectl")
    doc = kustomization("quick-start")
    for fragment in documents:
        for key, value in fragment.items():
            if key in ("resources", "components", "transformers"):
                value = [str((OVERLAYS["quick-start"] / p).resolve()) for p in value]
            if key == "images":  # an entry replaces the overlay's own for that image
                given = {entry["name"] for entry in value}
                doc[key] = [e for e in doc.get(key, []) if e["name"] not in given]
            doc[key] = [*doc.get(key, []), *value] if isinstance(value, list) else value
    for key in ("resources", "components", "transformers"):
        doc[key] = [os.path.relpath(p, scratch) for p in doc.get(key) or []]
    (scratch / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [kubectl, "kustomize", str(scratch)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{block.id}: {done.stderr}"
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    for entry in doc.get("images", []):
        (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
        image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == f"{entry['newName']}:{entry['newTag']}", block.id


def test_a_kubernetes_object_in_yaml_is_held_to_its_schema() -> None:
    """What test_yaml_block_is_valid does with a Kubernetes object: a field of the wrong
    type fails the block; a kind Kubernetes does not define is checked for metadata."""
    good = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n"
    bad = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: [k]\n"
    custom = "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: a}\n"
    for text in (good, custom):
        (block,) = parse(f"```yaml\n{text}```\n", "x.md")
        _validate(block, yaml.safe_load(block.text))
    (block,) = parse(f"```yaml\n{bad}```\n", "x.md")
    with pytest.raises(pytest.fail.Exception, match=r"^x\.md:1: "):
        _validate(block, yaml.safe_load(block.text))

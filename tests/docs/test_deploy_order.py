"""docs/install.md deploys in the order that works on a fresh cluster: the image is built
and made pullable (loaded into a local cluster, or pushed and named in the overlay)
before the first ``kubectl apply``, Helm installs the image pushed before, and the
quick-start names the image it expects."""

from __future__ import annotations

import re

import yaml

import trainjob_status

from .blocks import ROOT, parse

INSTALL = (ROOT / "docs" / "install.md").read_text()
QUICK_START = ROOT / "manifests" / "overlays" / "quick-start" / "kustomization.yaml"


def deploying_commands() -> list[list[str]]:
    """The shell lines of each block of docs/install.md's "Deploying" section, in order."""
    section = INSTALL.split("\n## Deploying\n", 1)[1].split("\n## ", 1)[0]
    return [
        [line.split("#", 1)[0].strip() for line in block.text.splitlines() if line.strip()]
        for block in parse(section, "docs/install.md")
        if block.language == "sh"
    ]


def installs_with_helm(lines: list[str]) -> bool:
    return any(line.startswith("helm install ") for line in lines)


def test_every_apply_comes_after_the_image_is_made_pullable() -> None:
    blocks = [lines for lines in deploying_commands() if not installs_with_helm(lines)]
    assert blocks
    for lines in blocks:
        applies = [i for i, line in enumerate(lines) if line.startswith("kubectl apply")]
        assert applies, lines
        before = lines[: applies[0]]
        assert any(line.startswith("docker build -t ") for line in before), lines
        loaded = any(
            re.match(r"(kind load docker-image|minikube image load) ", line) for line in before
        )
        pushed = any(line.startswith("docker push ") for line in before)
        named = any(line.startswith("kustomize edit set image ") for line in before)
        assert loaded or (pushed and named), lines


def test_the_local_cluster_block_builds_the_image_the_quick_start_expects() -> None:
    (entry,) = yaml.safe_load(QUICK_START.read_text())["images"]
    image = f"{entry['newName']}:{entry['newTag']}"
    # The release's own version, the one the Dockerfile builds.
    assert entry["newTag"] == trainjob_status.__version__
    local = next(
        lines for lines in deploying_commands() if any("kind load" in line for line in lines)
    )
    assert f"docker build -t {image} ." in local
    assert any(line.startswith(f"kind load docker-image {image}") for line in local)
    assert f"expects `{image}`" in " ".join(INSTALL.split())


def test_the_pushed_image_is_the_one_the_overlay_is_pointed_at() -> None:
    pushed = next(
        lines for lines in deploying_commands() if any("docker push" in line for line in lines)
    )
    (push,) = [line for line in pushed if line.startswith("docker push ")]
    (edit,) = [line for line in pushed if line.startswith("kustomize edit set image ")]
    image = push.removeprefix("docker push ")
    assert edit.endswith(f"trainjob-status={image}")


def test_helm_installs_the_image_pushed_before() -> None:
    """The Helm block comes after the block that pushes the image, and sets that image."""
    blocks = deploying_commands()
    (helm_at,) = [i for i, lines in enumerate(blocks) if installs_with_helm(lines)]
    pushes = [
        line.removeprefix("docker push ")
        for lines in blocks[:helm_at]
        for line in lines
        if line.startswith("docker push ")
    ]
    assert pushes
    command = " ".join(blocks[helm_at]).replace("\\", " ").split()
    sets = dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--set")
    assert f"{sets['image.repository']}:{sets['image.tag']}" in pushes

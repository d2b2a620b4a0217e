"""Where the tests look for Kubeflow Trainer's build is where ``make trainer-assets``
puts it, and a missing build says how to make it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from trainjob_devcluster.harness.kubeflow_trainer import (
    ASSETS_ENV,
    TrainerAssetsMissing,
    assets_folder,
    find_trainer_assets,
    private_mounts,
    private_mounts_usable,
)

ROOT = Path(__file__).resolve().parents[2]
GO_MOD = ROOT / "tools" / "trainer" / "go.mod"


def test_the_folder_is_the_makefiles(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    printed = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-s",
            "--eval",
            "print-trainer-dir: ; @echo $(TRAINER_ASSETS_DIR)",
            "print-trainer-dir",
            f"TRAINER_ASSETS_CACHE={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == str(assets_folder(GO_MOD, tmp_path))
    assert Path(printed).name == "trainer-v2.3.0-jobset-v0.12.0"


def test_a_missing_build_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(TrainerAssetsMissing) as missing:
        find_trainer_assets(GO_MOD, {ASSETS_ENV: str(tmp_path)})
    assert str(missing.value) == f"no Trainer build in {tmp_path} (make trainer-assets builds it)"
    (tmp_path / ".complete").touch()
    assert find_trainer_assets(GO_MOD, {ASSETS_ENV: str(tmp_path)}).root == tmp_path


def test_private_mounts_show_the_folder_to_that_process_only(tmp_path: Path) -> None:
    why = private_mounts_usable()
    if why and os.environ.get("TRAINJOB_STATUS_CI") == "1":
        pytest.fail(why)
    if why:
        pytest.skip(why)
    ours, target = tmp_path / "ours", tmp_path / "target"
    ours.mkdir()
    target.mkdir()
    (ours / "token").write_text("inside")
    (target / "token").write_text("outside")
    command = private_mounts({str(target): ours}, ["cat", str(target / "token")])
    shown = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert shown == "inside"
    assert (target / "token").read_text() == "outside"

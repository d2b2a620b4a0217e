"""Commit subjects of at most 72 characters: the hook `make hooks` installs refuses
longer ones with its reason, and every commit since the rule holds to it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "tools" / "git-hooks" / "commit-msg"
# The last commit before subjects were held to 72 characters; every later one is.
RULE_SINCE = "78a0c0b"


def run_hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(HOOK), str(path)], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("message", "stderr"),
    [
        ("Fix the thing\n\nWhy, at length.\n", ""),
        ("x" * 72 + "\n", ""),
        ("Subject\n\n# a comment line git strips\n", ""),
        (
            "x" * 73 + "\n",
            "commit-msg: the subject is 73 characters, over 72: put the detail in the body,"
            " after a blank line\n",
        ),
        (
            "Subject\nbody at once\n",
            "commit-msg: the second line is not blank: the body follows a blank line\n",
        ),
        ("\n\nBody only\n", "commit-msg: the subject (first line) is empty\n"),
    ],
    ids=["subject-and-body", "72", "comments", "73", "no-blank-line", "empty"],
)
def test_the_hook_refuses_what_breaks_the_rule_and_says_why(
    tmp_path: Path, message: str, stderr: str
) -> None:
    done = run_hook(tmp_path, message)
    assert (done.returncode, done.stdout, done.stderr) == (1 if stderr else 0, "", stderr)


def test_make_hooks_points_git_at_the_hook() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        [make, "--no-print-directory", "-n", "hooks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout == "git config core.hooksPath tools/git-hooks\n"


def test_every_commit_since_the_rule_has_a_short_subject() -> None:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    known = subprocess.run(
        [git, "cat-file", "-e", f"{RULE_SINCE}^{{commit}}"], cwd=ROOT, check=False
    )
    # A shallow clone may stop before RULE_SINCE: then every commit it has is later.
    span = [f"{RULE_SINCE}..HEAD"] if known.returncode == 0 else ["HEAD"]
    subjects = subprocess.run(
        [git, "log", "--format=%h %s", *span], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert subjects
    long = [line for line in subjects if len(line.split(" ", 1)[1]) > 72]
    assert long == []

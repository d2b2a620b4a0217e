"""The krew archive of ``kubectl trainjob`` and the manifest that installs it.

    python plugin/krew/archive.py archive OUT_DIR
    python plugin/krew/archive.py manifest REPOSITORY OUT_DIR

``archive`` writes ``kubectl-trainjob-vVERSION.tar.gz`` (the launcher, with the version of
plugin/pyproject.toml written into its install hint) and prints its sha256. The same
sources give the same bytes on any machine: entries sorted, fixed mtimes, owners and
modes, no name or time in the gzip header, and the launcher stored without compression
(deflate's output is not the same from one zlib to the next; the launcher is 1 KiB).
``manifest`` builds the archive the same way, checks its sha256 against
krew/trainjob.yaml's and writes that manifest with the release page of REPOSITORY
(``owner/name`` on GitHub) filled in, ready for the release and for krew's index.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import sys
import tarfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "trainjob.yaml"
LAUNCHER = HERE / "kubectl-trainjob"
# What the manifest holds in place of the repository until a release fills it in.
REPOSITORY_PLACEHOLDER = "${GITHUB_REPOSITORY}"
# 2000-01-01T00:00:00Z: any fixed time would do; zero reads as "no time" to some tools.
MTIME = 946684800


def version() -> str:
    with (HERE.parent / "pyproject.toml").open("rb") as file:
        found: str = tomllib.load(file)["project"]["version"]
        return found


def archive_name() -> str:
    return f"kubectl-trainjob-v{version()}.tar.gz"


def entries() -> list[tuple[str, bytes, int]]:
    """(name, content, mode) of each file, in the order they are written."""
    launcher = LAUNCHER.read_bytes().replace(b"@VERSION@", version().encode())
    license_text = (HERE.parent / "LICENSE").read_bytes()
    return sorted([("kubectl-trainjob", launcher, 0o755), ("LICENSE", license_text, 0o644)])


def archive_bytes() -> bytes:
    tar_buffer = io.BytesIO()
    with tarfile.open(fileobj=tar_buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, content, mode in entries():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(content))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=0, mtime=0) as gz:
        gz.write(tar_buffer.getvalue())
    return out.getvalue()


def write_archive(out_dir: Path) -> tuple[Path, str]:
    data = archive_bytes()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / archive_name()
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def manifest_sha256(text: str) -> str:
    found = re.findall(r"^\s*sha256:\s*\"?([0-9a-f]{64})\"?\s*$", text, re.MULTILINE)
    if len(set(found)) != 1:
        raise SystemExit(f"{MANIFEST.name}: expected one sha256, found {found}")
    return str(found[0])


def release_manifest(repository: str) -> str:
    """krew/trainjob.yaml with REPOSITORY's release page in place of the placeholder."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repository):
        raise SystemExit(f"REPOSITORY must be owner/name, not {repository!r}")
    text = MANIFEST.read_text()
    if REPOSITORY_PLACEHOLDER not in text:
        raise SystemExit(f"{MANIFEST.name} holds no {REPOSITORY_PLACEHOLDER}")
    return text.replace(REPOSITORY_PLACEHOLDER, repository)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "archive":
        path, sha256 = write_archive(Path(argv[1]))
        print(f"{path}  sha256 {sha256}")
        return 0
    if len(argv) == 3 and argv[0] == "manifest":
        text = release_manifest(argv[1])
        path, sha256 = write_archive(Path(argv[2]))
        if sha256 != manifest_sha256(text):
            print(
                f"{MANIFEST.name} says sha256 {manifest_sha256(text)}, {path.name} is {sha256}:"
                " update the manifest",
                file=sys.stderr,
            )
            return 1
        (Path(argv[2]) / MANIFEST.name).write_text(text)
        print(f"{Path(argv[2]) / MANIFEST.name}: {path.name} sha256 {sha256}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

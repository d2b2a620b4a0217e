"""Kubeconfig files for the development cluster's admin (and any bearer token)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml


def kubeconfig(
    server: str, ca_pem: bytes, token: str, name: str = "devcluster"
) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": name, "user": f"{name}-admin", "namespace": "default"},
            }
        ],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, token: str) -> Path:
    """Write atomically with mode 0600: the file holds a credential, and a reader polling
    for it must never see half of it."""
    text = yaml.safe_dump(kubeconfig(server, ca_pem, token), sort_keys=False)
    return write_private(path, text.encode())


def write_private(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically with mode 0600 (a key, a token, a
    credential): no other user may read it, and a reader polling for it never sees half
    of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
    return path

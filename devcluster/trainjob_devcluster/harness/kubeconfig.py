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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.safe_dump(kubeconfig(server, ca_pem, token), handle, sort_keys=False)
    os.replace(tmp, path)
    return path

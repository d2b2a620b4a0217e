"""What the pod injector does to a pod (pure: no I/O).

A TrainJob's training pods get what the Trainer's own ``TrainJobStatus`` plugin gives
them, pointed at this server: three ``KUBEFLOW_TRAINER_SERVER_*`` variables in every
container and a read-only mount at ``/var/run/secrets/kubeflow/trainer`` of one projected
volume (a service-account token for the TrainJob's audience, and ``ca.crt`` from the
per-namespace CA ConfigMap). Same names, paths and volume name as Kubeflow Trainer's
status server, so a pod looks the same to the clients whichever injected it; only the
URL (our Service) and the ConfigMap (one per namespace instead of one per TrainJob)
differ.

The decision is a JSON Patch (RFC 6902) against the pod as admission shows it:

- only additions, except that ``override_existing`` replaces what another injector
  put at our names (the variables, the volume, the mount at our path);
- idempotent: a pod that already carries our injection gets an empty patch, so a
  re-invocation (``reinvocationPolicy: IfNeeded``) adds nothing twice, yet a container
  another webhook added since is completed;
- a pod that carries someone else's values (the Trainer's feature is on, or the user
  set them) is left alone unless ``override_existing``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from trainjob_status.contract import (
    ANCESTOR_STEP_LABEL,
    CA_CERT_ENV,
    JOBSET_NAME_LABEL,
    TOKEN_ENV,
    URL_ENV,
    audience,
    status_path,
)

from ..kube.views import keep_controller

MOUNT_PATH = "/var/run/secrets/kubeflow/trainer"
VOLUME_NAME = "kubeflow-trainer-token"  # Kubeflow Trainer's name for the same volume
CA_KEY = "ca.crt"
TOKEN_FILE = "token"
TOKEN_EXPIRATION_SECONDS = 3600

CA_CONFIGMAP = "trainjob-status-ca"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
DEFAULT_SELECTOR = f"{ANCESTOR_STEP_LABEL}=trainer"

# Outcomes, as counted in trainjob_status_injections_total{result}.
INJECTED = "injected"
OVERRIDDEN = "overridden"  # another injector's values replaced (--override-existing)
UNCHANGED = "unchanged"  # already carries our injection (a re-invocation)
PRESENT = "present"  # carries another injector's (or the user's) values: left alone
NOT_SELECTED = "not_selected"  # not a TrainJob pod, or not one the selector picks
UNKNOWN_TRAINJOB = "unknown_trainjob"
IGNORED = "ignored"  # not a pod CREATE
ERROR = "error"
RESULTS = (
    INJECTED,
    OVERRIDDEN,
    UNCHANGED,
    PRESENT,
    NOT_SELECTED,
    UNKNOWN_TRAINJOB,
    IGNORED,
    ERROR,
)

Patch = list[dict[str, Any]]


# -- label selectors -----------------------------------------------------------------------


_SET_TERM = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator == "in":
            return labels.get(self.key) in self.values
        # notin (and !=) also match a pod without the label, as Kubernetes selectors do.
        return labels.get(self.key) not in self.values


@dataclass(frozen=True)
class Selector:
    """A Kubernetes label selector in its string form (``k=v``, ``k!=v``, ``k``, ``!k``,
    ``k in (a,b)``, ``k notin (a,b)``, comma-separated); empty selects everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Selector:
        """ValueError names the term that does not parse."""
        terms = _split_terms(text)
        return cls(tuple(_requirement(term) for term in terms))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def keys(self) -> frozenset[str]:
        """The label keys the selector reads: all a label set must keep for it."""
        return frozenset(r.key for r in self.requirements)


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    if len(terms) == 1 and not terms[0].strip():
        return []
    return terms


def _requirement(term: str) -> Requirement:
    if found := _SET_TERM.match(term):
        values = frozenset(v.strip() for v in found.group(3).split(",") if v.strip())
        if not values:
            raise ValueError(f"label selector term {term.strip()!r} lists no values")
        return Requirement(found.group(1), found.group(2), values)
    if found := _EQ_TERM.match(term):
        operator = "notin" if found.group(2) == "!=" else "in"
        return Requirement(found.group(1), operator, frozenset({found.group(3)}))
    if found := _EXISTS_TERM.match(term):
        return Requirement(found.group(2), "!exists" if found.group(1) else "exists")
    raise ValueError(f"label selector term {term.strip()!r} does not parse")


# -- which pods ----------------------------------------------------------------------------


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def trainjob_of(pod: Mapping[str, Any]) -> str | None:
    """The TrainJob a pod belongs to: its JobSet's name (the Trainer names the JobSet
    after the TrainJob), or None for a pod no JobSet made."""
    return labels_of(pod).get(JOBSET_NAME_LABEL) or None


def step_labels(jobset: Mapping[str, Any], replicated_job: str) -> dict[str, str]:
    """The labels of the JobSet's replicated job ``replicated_job``: where the runtime
    puts ``trainer.kubeflow.org/trainjob-ancestor-step`` (on the Job template, so the
    pods themselves never carry it)."""
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if isinstance(rjob, dict) and rjob.get("name") == replicated_job:
            return labels_of(rjob.get("template") or {})
    return {}


def jobset_view(jobset: Mapping[str, Any], label_keys: frozenset[str]) -> dict[str, Any]:
    """What the injector keeps of a JobSet: its identity, its controller (the TrainJob:
    the pod binding's owner chain reads it from the same cache) and, per replicated job,
    the name and those template labels the selector reads (``label_keys``)."""
    meta = jobset.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    kept_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    keep_controller(dict(jobset), kept_meta)
    steps = []
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if not isinstance(rjob, dict) or not isinstance(rjob.get("name"), str):
            continue
        labels = labels_of(rjob.get("template") or {})
        kept = {k: v for k, v in labels.items() if k in label_keys}
        steps.append({"name": rjob["name"], "template": {"metadata": {"labels": kept}}})
    return {"metadata": kept_meta, "spec": {"replicatedJobs": steps}}


# -- what to add ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where injected pods report: the Service in front of the server and the ConfigMap
    that carries its CA in every TrainJob namespace."""

    service: str = "trainjob-status"
    namespace: str = "trainjob-status"
    port: int = 10443
    ca_configmap: str = CA_CONFIGMAP

    def base_url(self) -> str:
        return f"https://{self.service}.{self.namespace}.svc:{self.port}"

    def url(self, namespace: str, trainjob: str) -> str:
        """The status URL as Kubeflow Trainer's status server builds it: Service URL plus
        the status path."""
        return self.base_url() + status_path(namespace, trainjob)

    def env(self, namespace: str, trainjob: str) -> list[dict[str, Any]]:
        return [
            {"name": URL_ENV, "value": self.url(namespace, trainjob)},
            {"name": CA_CERT_ENV, "value": f"{MOUNT_PATH}/{CA_KEY}"},
            {"name": TOKEN_ENV, "value": f"{MOUNT_PATH}/{TOKEN_FILE}"},
        ]

    def volume(self, namespace: str, trainjob: str) -> dict[str, Any]:
        return {
            "name": VOLUME_NAME,
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": audience(namespace, trainjob),
                            "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
                            "path": TOKEN_FILE,
                        }
                    },
                    {
                        "configMap": {
                            "name": self.ca_configmap,
                            "items": [{"key": CA_KEY, "path": CA_KEY}],
                        }
                    },
                ]
            },
        }

    @staticmethod
    def mount() -> dict[str, Any]:
        return {"name": VOLUME_NAME, "mountPath": MOUNT_PATH, "readOnly": True}


@dataclass(frozen=True)
class Plan:
    outcome: str
    patch: Patch


def plan(
    pod: Mapping[str, Any],
    namespace: str,
    trainjob: str,
    target: Target,
    *,
    override_existing: bool = False,
) -> Plan:
    """The JSON Patch that gives ``pod`` (of ``trainjob`` in ``namespace``) our injection,
    and what it amounts to (one of the outcomes above)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise ValueError("pod has no spec")
    ops: Patch = []
    foreign = False

    want_volume = target.volume(namespace, trainjob)
    foreign |= _upsert(ops, "/spec/volumes", spec.get("volumes"), want_volume, _named(VOLUME_NAME))
    want_env = target.env(namespace, trainjob)
    want_mount = target.mount()
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ValueError("pod has no containers")
    for index, container in enumerate(containers):
        if not isinstance(container, dict):
            raise ValueError(f"container {index} is not an object")
        base = f"/spec/containers/{index}"
        env = container.get("env")
        missing = []
        for want in want_env:
            found = _find(env, _named(want["name"]))
            if found is None:
                missing.append(want)
            elif not _covers(want, found[1]):
                foreign = True
                ops.append({"op": "replace", "path": f"{base}/env/{found[0]}", "value": want})
        _add_all(ops, f"{base}/env", env, missing)
        mounts = container.get("volumeMounts")
        foreign |= _upsert(ops, f"{base}/volumeMounts", mounts, want_mount, _at(MOUNT_PATH))

    if foreign and not override_existing:
        return Plan(PRESENT, [])
    if not ops:
        return Plan(UNCHANGED, [])
    return Plan(OVERRIDDEN if foreign else INJECTED, ops)


def elsewhere(pod: Mapping[str, Any], target: Target) -> str:
    """Where the status server URL a pod already carries points, as
    ``scheme://host[:port]``, when it is not ``target``; empty when no container sets a
    URL of someone else's as a plain value (the user set the variables otherwise)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if not isinstance(container, dict):
            continue
        found = _find(container.get("env"), _named(URL_ENV))
        value = found[1].get("value") if found is not None else None
        if not isinstance(value, str):
            continue
        try:
            parts = urlsplit(value)
        except ValueError:
            return ""
        if parts.netloc and parts.netloc != urlsplit(target.base_url()).netloc:
            return f"{parts.scheme}://{parts.netloc}"
    return ""


class FirstSighting:
    """Says whether a key is seen for the first time, remembering the ``size`` most
    recently seen keys only (memory stays bounded however many TrainJobs pass; a key
    forgotten since is taken as new)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._seen: OrderedDict[Hashable, None] = OrderedDict()

    def first(self, key: Hashable) -> bool:
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        if len(self._seen) > self.size:
            self._seen.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._seen)


Match = Callable[[dict[str, Any]], bool]


def _named(name: str) -> Match:
    return lambda item: item.get("name") == name


def _at(path: str) -> Match:
    return lambda item: item.get("mountPath") == path


def _find(items: Any, match: Match) -> tuple[int, dict[str, Any]] | None:
    """The first item of the list ``items`` that ``match`` accepts, with its index."""
    if not isinstance(items, list):
        return None
    for index, item in enumerate(items):
        if isinstance(item, dict) and match(item):
            return index, item
    return None


def _upsert(ops: Patch, path: str, items: Any, want: dict[str, Any], match: Match) -> bool:
    """Add ``want`` to the list at ``path``, or replace the item ``match`` finds there if
    it is not ours; True when there was such a foreign item."""
    found = _find(items, match)
    if found is None:
        _add_all(ops, path, items, [want])
        return False
    if _covers(want, found[1]):
        return False
    ops.append({"op": "replace", "path": f"{path}/{found[0]}", "value": want})
    return True


def _add_all(ops: Patch, path: str, items: Any, new: list[dict[str, Any]]) -> None:
    if not new:
        return
    if not isinstance(items, list):
        # Absent (or null): the list is added whole. A JSON Patch "add" of an existing
        # member replaces it, so this is only ever done for a missing list.
        ops.append({"op": "add", "path": path, "value": list(new)})
        return
    ops.extend({"op": "add", "path": f"{path}/-", "value": item} for item in new)


def _covers(want: Any, have: Any) -> bool:
    """``have`` says everything ``want`` says (it may say more: the API server's
    defaults, such as a projected volume's ``defaultMode``, added after we patched)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            key in have and _covers(value, have[key]) for key, value in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(_covers(w, h) for w, h in zip(want, have, strict=True))
        )
    return bool(want == have)

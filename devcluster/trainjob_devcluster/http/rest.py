"""Create, read, update, patch and delete of stored objects, as the API server does them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..common import status
from ..common.faults import RequestInfo
from ..common.resources import ResourceType
from ..common.status import ApiError
from ..storage import objects
from ..storage.apply import apply
from ..storage.patches import PatchError, decode_patch, json_merge_patch, json_patch
from ..storage.store import Obj, Store
from . import bodies


@dataclass
class Call:
    """One resource request, decoded."""

    info: RequestInfo
    resource: ResourceType
    query: Mapping[str, str]
    body: bytes = b""
    content_type: str = ""

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == "All"


@dataclass
class Answer:
    code: int
    body: Obj


def _object_body(call: Call) -> Obj:
    return bodies.decode_object(call.body, call.content_type)


class ResourceApi:
    """The stored-object verbs of the development cluster."""

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    # -- helpers -------------------------------------------------------------------------

    def _not_found(self, resource: ResourceType, name: str) -> ApiError:
        return status.not_found(resource.qualified, resource.group, resource.plural, name)

    def _live(self, call: Call) -> Obj:
        obj = self.store.get(call.resource.qualified, call.info.namespace, call.info.name)
        if obj is None:
            raise self._not_found(call.resource, call.info.name)
        return obj

    def _check_rv(self, call: Call, live: Obj, sent: Any) -> None:
        if sent and str(sent) != live["metadata"]["resourceVersion"]:
            r = call.resource
            raise status.conflict(r.qualified, r.group, r.plural, call.info.name)

    def _store(self, call: Call, new: Obj, old: Obj | None) -> Obj:
        if call.dry_run:
            return new
        if old is None:
            return self.store.create(call.resource.qualified, new)
        if objects.unchanged(old, new):
            return old
        return self.store.update(call.resource.qualified, new, old)

    # -- verbs ---------------------------------------------------------------------------

    def get(self, call: Call) -> Answer:
        return Answer(200, self._live(call))

    def create(self, call: Call) -> Answer:
        resource, info = call.resource, call.info
        body = _object_body(call)
        meta = body.get("metadata") or {}
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + objects.random_suffix()
                body["metadata"] = meta
            else:
                raise status.invalid(
                    resource.kind_qualified,
                    resource.group,
                    resource.kind,
                    "",
                    [
                        status.Cause(
                            "FieldValueRequired",
                            "Required value: name or generateName is required",
                            "metadata.name",
                        )
                    ],
                )
        if resource.namespaced:
            sent_ns = meta.get("namespace")
            if sent_ns and sent_ns != info.namespace:
                raise status.bad_request(
                    "the namespace of the provided object does not match "
                    "the namespace sent on the request"
                )
            if self.store.get("namespaces", "", info.namespace) is None:
                raise status.not_found("namespaces", "", "namespaces", info.namespace)
        new = objects.for_create(resource, body, info.namespace, self.clock())
        name = new["metadata"]["name"]
        if self.store.get(resource.qualified, info.namespace, name) is not None:
            raise status.already_exists(resource.qualified, resource.group, resource.plural, name)
        return Answer(201, self._store(call, new, None))

    def update(self, call: Call) -> Answer:
        resource = call.resource
        body = _object_body(call)
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != call.info.name:
            raise status.bad_request(
                f"the name of the object ({meta['name']}) does not match "
                f"the name on the URL ({call.info.name})"
            )
        live = self._live(call)
        if not meta.get("resourceVersion") and not resource.builtin:
            raise ApiError(
                422,
                "Invalid",
                f'{resource.qualified} "{call.info.name}" is invalid: metadata.resourceVersion: '
                "Invalid value: 0: must be specified for an update",
                {
                    "name": call.info.name,
                    "group": resource.group,
                    "kind": resource.plural,
                    "causes": [
                        status.Cause(
                            "FieldValueInvalid",
                            "Invalid value: 0: must be specified for an update",
                            "metadata.resourceVersion",
                        ).to_json()
                    ],
                },
            )
        self._check_rv(call, live, meta.get("resourceVersion"))
        return self._write(call, live, body)

    def _write(self, call: Call, live: Obj, computed: Obj) -> Answer:
        """Store the outcome of an Update-type write (PUT or a non-apply patch)."""
        resource = call.resource
        if call.info.subresource == "status":
            new = objects.for_status_update(live, computed)
        else:
            new = objects.for_main_update(resource, live, computed)
        new["metadata"]["managedFields"] = live["metadata"].get("managedFields", [])
        return Answer(200, self._store(call, new, live))

    def patch(self, call: Call) -> Answer:
        kind = bodies.media_type(call.content_type)
        if kind == bodies.APPLY:
            return self._apply(call)
        if kind not in (bodies.MERGE, bodies.JSON_PATCH):
            # Strategic merge patch included: served for no resource, built-in or custom.
            raise status.unsupported_media_type()
        live = self._live(call)
        try:
            patch = decode_patch(call.body)
            if kind == bodies.JSON_PATCH:
                patched = json_patch(live, patch)
            else:
                patched = json_merge_patch(live, patch)
        except PatchError as exc:
            raise _patch_failure(exc) from exc
        if isinstance(patch, dict):
            self._check_rv(call, live, (patch.get("metadata") or {}).get("resourceVersion"))
        if not isinstance(patched, dict):
            raise ApiError(
                422, "Invalid", "the server rejected our request due to an error in our request", {}
            )
        return self._write(call, live, patched)

    def _apply(self, call: Call) -> Answer:
        resource, info = call.resource, call.info
        manager = call.query.get("fieldManager")
        if not manager or len(manager) > 128:
            cause = (
                status.Cause(
                    "FieldValueRequired",
                    "Required value: is required for apply patch",
                    "fieldManager",
                )
                if not manager
                else status.Cause(
                    "FieldValueTooLong", "Too long: may not be more than 128 bytes", "fieldManager"
                )
            )
            raise ApiError(
                422,
                "Invalid",
                f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: {cause.message}',
                {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [cause.to_json()]},
            )
        config = bodies.decode_apply(call.body)
        meta = config.get("metadata") or {}
        if meta.get("name") and meta["name"] != info.name:
            raise status.bad_request(
                f"the name of the object ({meta['name']}) does not match "
                f"the name on the URL ({info.name})"
            )
        live = self.store.get(resource.qualified, info.namespace, info.name)
        if live is None and info.subresource:
            raise self._not_found(resource, info.name)
        if live is not None:
            self._check_rv(call, live, meta.get("resourceVersion"))
        applied = apply(
            live,
            config,
            manager=manager,
            subresource=info.subresource or None,
            has_status="status" in resource.subresources,
            api_version=resource.group_version,
            now=objects.rfc3339(self.clock()),
        )
        if live is None:
            applied["metadata"]["name"] = info.name
            return self.create_from(call, applied)
        if info.subresource == "status":
            new = objects.for_status_update(live, applied)
        else:
            new = objects.for_main_update(resource, live, applied)
        return Answer(200, self._store(call, new, live))

    def create_from(self, call: Call, applied: Obj) -> Answer:
        """Apply to a missing object creates it (main resource only)."""
        resource, info = call.resource, call.info
        if resource.namespaced and self.store.get("namespaces", "", info.namespace) is None:
            raise status.not_found("namespaces", "", "namespaces", info.namespace)
        managed = applied.get("metadata", {}).get("managedFields", [])
        new = objects.for_create(resource, applied, info.namespace, self.clock())
        new["metadata"]["managedFields"] = managed
        return Answer(201, self._store(call, new, None))

    def delete(self, call: Call) -> Answer:
        resource, info = call.resource, call.info
        live = self._live(call)
        if call.body:
            options = bodies.decode_object(call.body, call.content_type)
            pre = (options or {}).get("preconditions") or {} if isinstance(options, dict) else {}
            if pre.get("uid") and pre["uid"] != live["metadata"]["uid"]:
                raise status.conflict(
                    resource.qualified, resource.group, resource.plural, info.name
                )
            self._check_rv(call, live, pre.get("resourceVersion"))
        if call.dry_run:
            return Answer(200, live)
        if resource.plural == "namespaces" and resource.builtin:
            # No namespace controller here: the namespace's objects go with it at once.
            for kind in list(self.store.all_resources()):
                for obj in self.store.list(kind, info.name):
                    self.store.delete(kind, info.name, obj["metadata"]["name"])
        deleted = self.store.delete(resource.qualified, info.namespace, info.name)
        assert deleted is not None
        return Answer(200, deleted)


def _patch_failure(exc: PatchError) -> ApiError:
    """A patch that does not decode or apply, answered with the real server's code: a
    failing JSON patch operation is a bare 422 without details."""
    if exc.code == 400:
        return status.bad_request(exc.message)
    return ApiError(
        422, "Invalid", "the server rejected our request due to an error in our request", {}
    )

"""Unit tests for guests without WebAssembly: :class:`FakeCluster`, an in-memory API server the
guest's :class:`~krec_guest.Context` calls, natively, under ``pytest``::

    from krec_guest import Request
    from krec_guest.testing import FakeCluster

    def test_labels_the_replicaset():
        cluster = FakeCluster([replicaset("web", {"app": "web"}), pod("web-1", {"app": "web"})])
        cluster.reconcile(PodCounter(), Request("default", "web"))
        assert cluster.object(ReplicaSet, "web", "default")["metadata"]["labels"]["pod-count"] == "1"

What it does as kube-apiserver does: resourceVersions, ``generateName``, conflicts on a stale
resourceVersion, ``already exists``/``not found`` errors, label and field selectors, the status
subresource of the built-in kinds that have one (and of kinds named in ``status_subresource``),
finalizers (a delete only marks the object), merge and JSON patches. Where it is simpler: no
schema validation, defaulting, admission or garbage collection; a strategic merge patch and a
server-side apply are applied as merge patches (lists replaced whole, no field ownership); no
permission checks (the manifest's permissions are checked by krec, and by ``krec dev``).
Objects pass through JSON on every call, as they do between a guest and krec.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from . import log as _log
from .admission import AdmissionRequest, Converter, Mutator, Validator, Verdict, mutated
from .context import Context
from .guest import _takes_context
from .errors import AlreadyExists, Conflict, Forbidden, Invalid, KrecError, NotFound
from .kinds import Kind
from .patches import apply_json_patch, diff, merge
from .reconciler import Action, Reconciler, Request
from .selectors import matches

#: Built-in kinds whose status is a subresource: ``update`` keeps their stored status.
STATUS_SUBRESOURCE = frozenset(
    {
        "Pod", "ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob",
        "Service", "Node", "Namespace", "PersistentVolume", "PersistentVolumeClaim",
        "ReplicationController", "HorizontalPodAutoscaler", "PodDisruptionBudget",
        "CustomResourceDefinition", "Ingress",
    }
)  # fmt: skip


def resource(kind: Kind) -> str:
    """The resource name kube-apiserver uses in messages: ``replicasets.apps``, ``pods``."""
    lower = kind.kind.lower()
    if lower.endswith("y") and not lower.endswith(("ay", "ey", "oy", "uy")):
        plural = lower[:-1] + "ies"
    elif lower.endswith(("s", "x", "ch", "sh")):
        plural = lower + "es"
    else:
        plural = lower + "s"
    return f"{plural}.{kind.group}" if kind.group else plural


@dataclass
class Mutated:
    """What a mutator answered: its verdict, the object it left and the JSON patch from the
    request's object to it (empty when unchanged)."""

    verdict: Verdict
    object: Optional[dict]
    patch: list[dict]


@dataclass
class RecordedEvent:
    """An Event a guest recorded."""

    regarding: dict
    type: str
    reason: str
    message: str


class FakeCluster:
    """An in-memory cluster: seed it with objects, run a guest's parts against it, look at what
    they wrote, the Events they recorded and the lines they logged."""

    def __init__(self, objects: Iterable[dict] = (), status_subresource: Iterable[str] = ()) -> None:
        self._store: dict[tuple[str, str, str, str], dict] = {}
        self._version = 1000
        self._status_kinds = STATUS_SUBRESOURCE | frozenset(status_subresource)
        self._failures: list[tuple[str, Optional[Kind], KrecError]] = []
        #: Events recorded, oldest first.
        self.events: list[RecordedEvent] = []
        #: Lines logged, as ``(level, message)``.
        self.logs: list[tuple[str, str]] = []
        #: Writes made, as ``(verb, kind, namespace, name)``.
        self.writes: list[tuple[str, Kind, Optional[str], str]] = []
        self.add(*objects)

    # Seeding and looking.

    def add(self, *objects: dict) -> "FakeCluster":
        """Store ``objects`` as they are (a resourceVersion, uid and creationTimestamp are added
        when missing); replaces objects with the same key."""
        for obj in objects:
            obj = json.loads(json.dumps(obj))
            self._stamp(obj, new=True)
            self._store[self._key_of(obj)] = obj
        return self

    def object(self, kind: Kind, name: str, namespace: Optional[str] = None) -> Optional[dict]:
        """The stored object (a copy), or ``None``."""
        found = self._store.get(self._key(kind, namespace, name))
        return copy.deepcopy(found)

    def objects(self, kind: Kind, namespace: Optional[str] = None) -> list[dict]:
        """The stored objects of ``kind`` (in ``namespace`` when given), by namespace and name."""
        return [
            copy.deepcopy(obj)
            for key, obj in sorted(self._store.items())
            if key[:2] == (kind.group, kind.kind) and (namespace is None or key[2] == namespace)
        ]

    def fail_next(self, verb: str, error: KrecError, kind: Optional[Kind] = None) -> "FakeCluster":
        """Make the next ``verb`` call (``get``, ``list``, ``create``, ``update``, ``patch``,
        ``delete``, ``record_event``), of ``kind`` when given, raise ``error``."""
        self._failures.append((verb, kind, error))
        return self

    # Running a guest's parts.

    def reconcile(self, reconciler: Reconciler, req: Request) -> Action:
        """Run ``reconciler`` for ``req``; an exception it raises propagates (in krec it fails
        the reconcile, which is logged and retried with backoff)."""
        with _log.installed(self):
            action = reconciler.reconcile(req, Context(self))
        if action is None:
            return Action.done()
        if not isinstance(action, Action):
            raise TypeError(f"reconcile returned {action!r}: return an Action (or None for done)")
        return action

    def map(self, reconciler: Reconciler, obj: dict) -> list[Request]:
        """Run ``reconciler.map`` for an event on ``obj`` — with a read-only context when it
        takes one, as krec runs it (a write raises :class:`~krec_guest.errors.Forbidden`)."""
        from .guest import _takes_context

        obj = json.loads(json.dumps(obj))
        with _log.installed(self):
            if _takes_context(reconciler.map):
                return list(reconciler.map(Kind.of(obj), obj, Context(_ReadOnly(self))))
            return list(reconciler.map(Kind.of(obj), obj))

    def validate(self, validator: Validator, req: AdmissionRequest) -> Verdict:
        """Run ``validator`` on the review ``req``."""
        with _log.installed(self):
            return validator.validate(req, Context(self))

    def mutate(self, mutator: Mutator, req: AdmissionRequest) -> Mutated:
        """Run ``mutator`` on the review ``req``: its verdict, object and patch."""
        with _log.installed(self):
            verdict, obj = mutated(mutator, req, Context(self))
        if obj is None:
            return Mutated(verdict, req.object, [])
        return Mutated(verdict, obj, diff(req.object, obj))

    def convert(self, converter: Converter, objects: list[dict], desired_api_version: str) -> list[dict]:
        """Run ``converter`` on each object, as a conversion review does."""
        with _log.installed(self):
            return [
                json.loads(json.dumps(converter.convert(json.loads(json.dumps(o)), desired_api_version)))
                for o in objects
            ]

    # The host calls (krec_guest.context.Host), on JSON text.

    def get(self, kind: Kind, namespace: Optional[str], name: str) -> str:
        self._fail("get", kind)
        return json.dumps(self._stored(kind, namespace, name))

    def list(self, kind, namespace, label_selector, field_selector, uncached) -> list[str]:
        self._fail("list", kind)
        fields = self._fields(field_selector)
        found = []
        for obj in self.objects(kind, namespace):
            meta = obj.get("metadata") or {}
            if not matches(label_selector, meta.get("labels")):
                continue
            if not all(fn(meta) for fn in fields):
                continue
            found.append(json.dumps(obj))
        return found

    def create(self, obj: str) -> str:
        new = self._decode(obj)
        kind = Kind.of(new)
        self._fail("create", kind)
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise Invalid(f"{resource(kind)}: metadata.name: Required value: name or generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = self._key_of(new)
        if key in self._store:
            raise AlreadyExists(f'{resource(kind)} "{meta["name"]}" already exists')
        for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(field, None)
        self._stamp(new, new=True)
        self._store[key] = new
        self.writes.append(("create", kind, meta.get("namespace"), meta["name"]))
        return json.dumps(new)

    def update(self, obj: str, status: bool) -> str:
        new = self._decode(obj)
        kind = Kind.of(new)
        self._fail("update", kind)
        meta = new.get("metadata") or {}
        stored = self._stored(kind, meta.get("namespace"), meta.get("name", ""))
        self._check_version(kind, stored, meta.get("resourceVersion"))
        if status:
            result = copy.deepcopy(stored)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
        else:
            result = new
            if kind.kind in self._status_kinds:
                if "status" in stored:
                    result["status"] = copy.deepcopy(stored["status"])
                else:
                    result.pop("status", None)
        return self._replace("update_status" if status else "update", kind, stored, result)

    def patch(self, kind, namespace, name, how, body, status) -> str:
        self._fail("patch", kind)
        patch = self._decode(body, list_ok=(how == "json"))
        stored = self._store.get(self._key(kind, namespace, name))
        if stored is None:
            if how != "apply":
                raise NotFound(f'{resource(kind)} "{name}" not found')
            return self.create(json.dumps(patch))
        if how == "json":
            result = apply_json_patch(stored, patch)
        else:
            if isinstance(patch, dict):
                version = (patch.get("metadata") or {}).get("resourceVersion")
                self._check_version(kind, stored, version)
            result = merge(stored, patch)
        if status:
            kept = copy.deepcopy(stored)
            kept["status"] = result.get("status")
            result = kept
        elif kind.kind in self._status_kinds and "status" in stored:
            result["status"] = copy.deepcopy(stored["status"])
        return self._replace("patch", kind, stored, result)

    def delete(self, kind, namespace, name, uid, resource_version) -> None:
        self._fail("delete", kind)
        stored = self._stored(kind, namespace, name)
        meta = stored["metadata"]
        if uid is not None and meta.get("uid") != uid:
            raise Conflict(
                f'Operation cannot be fulfilled on {resource(kind)} "{name}": Precondition failed: '
                f"UID in precondition: {uid}, UID in object meta: {meta.get('uid')}"
            )
        if resource_version is not None and meta.get("resourceVersion") != resource_version:
            raise Conflict(
                f'Operation cannot be fulfilled on {resource(kind)} "{name}": Precondition failed: '
                f"ResourceVersion in precondition: {resource_version}, ResourceVersion in object meta: "
                f"{meta.get('resourceVersion')}"
            )
        self.writes.append(("delete", kind, namespace, name))
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                self._stamp(stored, new=False)
            return
        del self._store[self._key(kind, namespace, name)]

    def record_event(self, kind, namespace, name, uid, type, reason, message) -> None:
        self._fail("record_event", kind)
        regarding = {"apiVersion": kind.api_version, "kind": kind.kind, "namespace": namespace, "name": name, "uid": uid}
        self.events.append(RecordedEvent(regarding, type, reason, message))

    def log(self, level: str, message: str) -> None:
        self.logs.append((level, message))

    # Inside.

    @staticmethod
    def _key(kind: Kind, namespace: Optional[str], name: str) -> tuple[str, str, str, str]:
        return (kind.group, kind.kind, namespace or "", name)

    def _key_of(self, obj: dict) -> tuple[str, str, str, str]:
        meta = obj.get("metadata") or {}
        return self._key(Kind.of(obj), meta.get("namespace"), meta.get("name", ""))

    def _stored(self, kind: Kind, namespace: Optional[str], name: str) -> dict:
        stored = self._store.get(self._key(kind, namespace, name))
        if stored is None:
            raise NotFound(f'{resource(kind)} "{name}" not found')
        return stored

    def _check_version(self, kind: Kind, stored: dict, version: Optional[str]) -> None:
        if version and version != stored["metadata"].get("resourceVersion"):
            name = stored["metadata"].get("name", "")
            raise Conflict(
                f'Operation cannot be fulfilled on {resource(kind)} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again"
            )

    def _stamp(self, obj: dict, new: bool) -> None:
        meta = obj.setdefault("metadata", {})
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        if new:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            if "spec" in obj:
                meta.setdefault("generation", 1)

    def _replace(self, verb: str, kind: Kind, stored: dict, result: dict) -> str:
        meta, before = result.setdefault("metadata", {}), stored["metadata"]
        for field in ("uid", "creationTimestamp", "deletionTimestamp", "generation"):
            if field in before:
                meta[field] = before[field]
        if "generation" in before and result.get("spec") != stored.get("spec"):
            meta["generation"] = before["generation"] + 1
        if result == stored:
            return json.dumps(stored)
        self._stamp(result, new=False)
        self._store[self._key_of(result)] = result
        self.writes.append((verb, kind, meta.get("namespace"), meta.get("name", "")))
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self._store[self._key_of(result)]
        return json.dumps(result)

    def _fail(self, verb: str, kind: Optional[Kind]) -> None:
        for i, (failing, only, error) in enumerate(self._failures):
            if failing == verb and (only is None or only == kind):
                del self._failures[i]
                raise error

    @staticmethod
    def _decode(text: str, list_ok: bool = False) -> Any:
        try:
            value = json.loads(text)
        except ValueError as err:
            raise Invalid(f"the object is not JSON: {err}") from None
        if not isinstance(value, dict) and not (list_ok and isinstance(value, list)):
            raise Invalid("the object is not a JSON object")
        return value

    @staticmethod
    def _fields(selector: Optional[str]) -> list:
        checks = []
        for term in (selector or "").split(","):
            term = term.strip()
            if not term:
                continue
            negate = "!=" in term
            field, _, value = term.replace("!=", "=").replace("==", "=").partition("=")
            field = field.strip()
            if field not in ("metadata.name", "metadata.namespace"):
                raise Invalid(f'field label not supported: "{field}"')
            attribute = field.split(".")[1]
            checks.append(lambda meta, a=attribute, v=value.strip(), n=negate: (meta.get(a, "") == v) != n)
        return checks


class _ReadOnly:
    """A host that reads through ``cluster`` and refuses writes, as krec does during ``map``."""

    def __init__(self, cluster: "FakeCluster") -> None:
        self._cluster = cluster

    def __getattr__(self, name: str) -> Any:
        if name in ("create", "update", "patch", "delete", "record_event"):

            def refused(*_args: Any, **_kwargs: Any) -> Any:
                raise Forbidden("the guest may not write while mapping an event (map reads only)")

            return refused
        return getattr(self._cluster, name)

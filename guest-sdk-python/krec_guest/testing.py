"""Unit tests for guests without WebAssembly: :class:`FakeCluster`, the cluster a guest's
:class:`~krec_guest.Context` calls, natively, under ``pytest``::

    from krec_guest import Request
    from krec_guest.testing import FakeCluster

    def test_labels_the_replicaset():
        cluster = FakeCluster([replicaset("web", {"app": "web"}), pod("web-1", {"app": "web"})])
        cluster.reconcile(PodCounter(), Request("default", "web"))
        assert cluster.object(ReplicaSet, "web", "default")["metadata"]["labels"]["pod-count"] == "1"

The objects live in krec's own API server store (``krec fake-cluster``, started for each
``FakeCluster`` and found as ``$KREC`` or ``krec`` on ``PATH``): every verdict and message is
the cluster's — names, labels and annotations, the built-in kinds' schemas and defaults, a
CustomResourceDefinition's schema (add the CRD first), resourceVersion conflicts, ``generateName``,
the status subresource, finalizers and garbage collection, label and field selectors, merge, JSON,
strategic merge patches and server-side apply. Not here: admission webhooks, built-in controllers
(a Deployment makes no ReplicaSet) and permission checks (the manifest's permissions are checked
by krec, and by ``krec dev``). Objects pass through JSON on every call, as they do between a guest
and krec.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from . import log as _log
from .admission import AdmissionRequest, Converter, Mutator, Validator, Verdict, mutated
from .context import Context
from .guest import _takes_context
from .errors import BY_CASE, Forbidden, KrecError, NotFound, Other
from .kinds import Kind
from .patches import diff
from .reconciler import Action, Reconciler, Request



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


class _Krec:
    """A ``krec fake-cluster`` process: krec's object store, one call per line of JSON."""

    def __init__(self) -> None:
        krec = os.environ.get("KREC") or shutil.which("krec")
        if not krec:
            raise RuntimeError(
                "FakeCluster: the fake cluster is krec's own API server store, and krec is not on "
                "PATH (nor in $KREC); install krec or set KREC to its path"
            )
        try:
            self._process = subprocess.Popen(
                [krec, "fake-cluster"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
            )
        except OSError as err:
            raise RuntimeError(f"FakeCluster: starting {krec} fake-cluster: {err}") from None
        # The process ends when its stdin closes: with this object, or at the latest at exit.
        self._closed = weakref.finalize(self, _end, self._process)

    def call(self, op: str, **fields: Any) -> Any:
        """krec's answer to one call: its value, or the error it names raised."""
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except OSError as err:
            line, cause = "", err
        else:
            cause = None
        if not line:
            raise RuntimeError(f"FakeCluster: krec fake-cluster ended (exit status {process.poll()}): {cause or 'no answer'}")
        answer = json.loads(line)
        if "error" in answer:
            error = answer["error"]
            raise BY_CASE.get(error["case"].replace("_", "-"), Other)(error["message"])
        return answer["ok"]


def _end(process: subprocess.Popen) -> None:
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
    if process.stdout is not None:
        process.stdout.close()


def _kind_fields(kind: Kind, namespace: Optional[str]) -> dict[str, Any]:
    fields: dict[str, Any] = {"apiVersion": kind.api_version, "kind": kind.kind}
    if namespace:
        fields["namespace"] = namespace
    return fields


class FakeCluster:
    """A cluster for one test: seed it with objects, run a guest's parts against it, look at
    what they wrote, the Events they recorded and the lines they logged."""

    def __init__(self, objects: Iterable[dict] = ()) -> None:
        self._krec = _Krec()
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
        """Store ``objects`` as fixtures (not counted as writes), in order — a custom resource
        after its CustomResourceDefinition: each namespace is created when missing and each
        ``status`` is stored too. A fixture the cluster refuses raises its error, naming it."""
        for obj in objects:
            self._krec.call("add", object=obj)
        return self

    def add_files(self, *paths: "str | os.PathLike[str]") -> "FakeCluster":
        """Store the objects of YAML or JSON files (``---`` between documents) as :meth:`add`
        does: the guest's CustomResourceDefinitions, its examples."""
        for path in paths:
            with open(path, encoding="utf-8") as file:
                self._krec.call("add", text=file.read())
        return self

    def object(self, kind: Kind, name: str, namespace: Optional[str] = None) -> Optional[dict]:
        """The stored object, or ``None``."""
        try:
            return self._krec.call("get", name=name, **_kind_fields(kind, namespace))
        except NotFound:
            return None

    def objects(self, kind: Kind, namespace: Optional[str] = None) -> list[dict]:
        """The stored objects of ``kind`` (in ``namespace`` when given), by namespace and name."""
        return self._krec.call("list", **_kind_fields(kind, namespace))

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

    # The host calls (krec_guest.context.Host), on JSON text, answered by krec's store.

    def get(self, kind: Kind, namespace: Optional[str], name: str) -> str:
        self._fail("get", kind)
        return json.dumps(self._krec.call("get", name=name, **_kind_fields(kind, namespace)))

    def list(self, kind, namespace, label_selector, field_selector, uncached) -> list[str]:
        self._fail("list", kind)
        found = self._krec.call(
            "list", labelSelector=label_selector, fieldSelector=field_selector, **_kind_fields(kind, namespace)
        )
        return [json.dumps(obj) for obj in found]

    def create(self, obj: str) -> str:
        self._fail("create", _kind_of_text(obj))
        created = self._krec.call("create", object=obj)
        self._wrote("create", created)
        return json.dumps(created)

    def update(self, obj: str, status: bool) -> str:
        self._fail("update", _kind_of_text(obj))
        updated = self._krec.call("update", object=obj, status=status)
        self._wrote("update_status" if status else "update", updated)
        return json.dumps(updated)

    def patch(self, kind, namespace, name, how, body, status) -> str:
        self._fail("patch", kind)
        patched = self._krec.call(
            "patch", name=name, patchType=how, body=body, status=status, **_kind_fields(kind, namespace)
        )
        self._wrote("patch", patched)
        return json.dumps(patched)

    def delete(self, kind, namespace, name, uid, resource_version) -> None:
        self._fail("delete", kind)
        self._krec.call(
            "delete", name=name, uid=uid, resourceVersion=resource_version, **_kind_fields(kind, namespace)
        )
        self.writes.append(("delete", kind, namespace, name))

    def record_event(self, kind, namespace, name, uid, type, reason, message) -> None:
        self._fail("record_event", kind)
        regarding = {"apiVersion": kind.api_version, "kind": kind.kind, "namespace": namespace, "name": name, "uid": uid}
        self.events.append(RecordedEvent(regarding, type, reason, message))

    def log(self, level: str, message: str) -> None:
        self.logs.append((level, message))

    # Inside.

    def _wrote(self, verb: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        self.writes.append((verb, Kind.of(obj), meta.get("namespace"), meta.get("name", "")))

    def _fail(self, verb: str, kind: Optional[Kind]) -> None:
        for i, (failing, only, error) in enumerate(self._failures):
            if failing == verb and (only is None or kind is None or only == kind):
                del self._failures[i]
                raise error


def _kind_of_text(text: str) -> Optional[Kind]:
    """The kind an object's JSON text names, or ``None`` when it names none (krec then says
    what is wrong)."""
    try:
        return Kind.of(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None

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

"""The guest's view of the cluster: :class:`Context`, and the :class:`Host` it calls.

Inside WebAssembly the host is krec (the WIT ``client``, ``events`` and ``log`` imports, every
call checked against the guest's manifest); in unit tests it is :class:`krec_guest.testing.FakeCluster`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol, Sequence, Union

from .errors import NotFound
from .kinds import Kind

if TYPE_CHECKING:
    from .action import Action

#: A patch body: a dict (merge, strategic, apply) or a list of operations (JSON patch).
PatchBody = Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]

#: The patch types, as the WIT ``patch-type`` names them.
PATCH_TYPES = ("merge", "json", "strategic", "apply")

#: Log levels, as the WIT ``log.level`` names them.
LEVELS = ("trace", "debug", "info", "warn", "error")


class Host(Protocol):
    """One method per WIT host call, on JSON text; errors are :class:`~krec_guest.errors.KrecError`."""

    def get(self, kind: Kind, namespace: Optional[str], name: str) -> str: ...

    def list(
        self,
        kind: Kind,
        namespace: Optional[str],
        label_selector: Optional[str],
        field_selector: Optional[str],
        uncached: bool,
    ) -> list[str]: ...

    def create(self, obj: str) -> str: ...

    def update(self, obj: str, status: bool) -> str: ...

    def patch(
        self, kind: Kind, namespace: Optional[str], name: str, how: str, body: str, status: bool
    ) -> str: ...

    def delete(
        self,
        kind: Kind,
        namespace: Optional[str],
        name: str,
        uid: Optional[str],
        resource_version: Optional[str],
    ) -> None: ...

    def record_event(
        self,
        kind: Kind,
        namespace: Optional[str],
        name: str,
        uid: Optional[str],
        type: str,
        reason: str,
        message: str,
    ) -> None: ...

    def log(self, level: str, message: str) -> None: ...


def selector(labels: Union[None, str, Mapping[str, str]]) -> Optional[str]:
    """A label selector's text: a string as it is, a dict as ``k=v,…`` (its ``matchLabels``)."""
    if labels is None or isinstance(labels, str):
        return labels or None
    return ",".join(f"{key}={value}" for key, value in labels.items()) or None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Context:
    """Read and write cluster state, record Events and log: what ``reconcile``, ``validate`` and
    ``mutate`` are given.

    Objects are ``dict``s with ``apiVersion``, ``kind`` and ``metadata``. Reads come from the
    host's shared cache (``uncached=True`` asks the API server); writes go to the API server and
    return the object as it was stored. Errors are :mod:`krec_guest.errors` exceptions.
    """

    def __init__(self, host: Host) -> None:
        self._host = host

    def get(self, kind: Kind, name: str, namespace: Optional[str] = None) -> dict:
        """The object ``namespace/name`` of ``kind``; :class:`~krec_guest.errors.NotFound` when absent."""
        return json.loads(self._host.get(kind, namespace, name))

    def get_opt(self, kind: Kind, name: str, namespace: Optional[str] = None) -> Optional[dict]:
        """The object ``namespace/name`` of ``kind``, or ``None`` when it does not exist."""
        from .errors import NotFound

        try:
            return self.get(kind, name, namespace)
        except NotFound:
            return None

    def list(
        self,
        kind: Kind,
        namespace: Optional[str] = None,
        labels: Union[None, str, Mapping[str, str]] = None,
        fields: Optional[str] = None,
        uncached: bool = False,
    ) -> list[dict]:
        """Objects of ``kind``: in ``namespace`` (all when ``None``), matching the label selector
        ``labels`` (``"app=web,tier in (fe,be)"`` or ``{"app": "web"}``) and the field selector
        ``fields`` (``metadata.name``/``metadata.namespace``)."""
        texts = self._host.list(kind, namespace, selector(labels), fields or None, uncached)
        return [json.loads(text) for text in texts]

    def create(self, obj: Mapping[str, Any]) -> dict:
        """Create ``obj`` (``metadata.generateName`` is honoured); returns it as stored."""
        return json.loads(self._host.create(_dumps(obj)))

    def update(self, obj: Mapping[str, Any]) -> dict:
        """Replace ``obj``; its ``metadata.resourceVersion`` must match the stored one
        (:class:`~krec_guest.errors.Conflict` otherwise). Returns it as stored."""
        return json.loads(self._host.update(_dumps(obj), False))

    def update_status(self, obj: Mapping[str, Any]) -> dict:
        """Replace ``obj``'s status through the status subresource; returns it as stored."""
        return json.loads(self._host.update(_dumps(obj), True))

    def patch(
        self,
        kind: Kind,
        name: str,
        body: PatchBody,
        namespace: Optional[str] = None,
        type: str = "merge",
        status: bool = False,
    ) -> dict:
        """Patch ``namespace/name``: ``type`` is ``merge`` (RFC 7386, the default), ``json``
        (RFC 6902, ``body`` a list of operations), ``strategic`` or ``apply`` (server-side apply,
        owned by the guest's field manager); ``status`` patches the status subresource."""
        if type not in PATCH_TYPES:
            raise ValueError(f"patch type {type!r}: expected one of {', '.join(PATCH_TYPES)}")
        return json.loads(self._host.patch(kind, namespace, name, type, _dumps(body), status))

    def apply(self, obj: Mapping[str, Any], status: bool = False) -> dict:
        """Server-side apply ``obj`` (its intended state, owned by the guest's field manager)."""
        meta = obj.get("metadata") or {}
        return self.patch(
            Kind.of(obj), meta.get("name", ""), obj, meta.get("namespace"), "apply", status
        )

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: Optional[str] = None,
        uid: Optional[str] = None,
        resource_version: Optional[str] = None,
    ) -> None:
        """Delete ``namespace/name``, only if it still has ``uid``/``resource_version`` when given.
        Objects with finalizers are only marked for deletion; an absent one raises
        :class:`~krec_guest.errors.NotFound`."""
        self._host.delete(kind, namespace, name, uid, resource_version)

    def finalizer(
        self,
        obj: Mapping[str, Any],
        finalizer: str,
        apply: Callable[[dict], Optional["Action"]],
        cleanup: Callable[[dict], Optional["Action"]],
    ) -> Optional["Action"]:
        """Reconcile ``obj`` behind ``finalizer`` (e.g. ``example.com/cleanup``), as kube-runtime's
        ``finalizer`` and controller-runtime's finalizer helpers do. While the object lives it
        carries ``finalizer`` (added first, by an update whose own event brings the object back)
        and ``apply(obj)`` brings the world in line with it. Once it is being deleted,
        ``cleanup(obj)`` undoes what it made outside its owner references; when that returns, the
        finalizer is removed and the object goes. An exception from either leaves the finalizer
        on and the key is retried with backoff. An object being deleted without the finalizer is
        done. Returns what ``apply`` or ``cleanup`` returned (``None``: done)."""
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        deleting = bool(meta.get("deletionTimestamp"))
        has = finalizer in finalizers
        if not deleting and not has:
            self.update({**obj, "metadata": {**meta, "finalizers": [*finalizers, finalizer]}})
            return None
        if not deleting:
            return apply(dict(obj))
        if not has:
            return None
        action = cleanup(dict(obj))
        kept = [f for f in finalizers if f != finalizer]
        try:
            self.update({**obj, "metadata": {**meta, "finalizers": kept}})
        except NotFound:
            # Gone already: nothing left to remove the finalizer from.
            pass
        return action

    def record_event(
        self, regarding: Mapping[str, Any], reason: str, message: str, type: str = "Normal"
    ) -> None:
        """Record an Event about ``regarding`` (an object): ``type`` ``Normal`` or ``Warning``,
        ``reason`` a CamelCase word, ``message`` a sentence. Best effort for the caller: catch
        :class:`~krec_guest.errors.KrecError` when a lost Event does not matter."""
        if type not in ("Normal", "Warning"):
            raise ValueError(f"event type {type!r}: expected Normal or Warning")
        meta = regarding.get("metadata") or {}
        self._host.record_event(
            Kind.of(regarding),
            meta.get("namespace"),
            meta.get("name", ""),
            meta.get("uid"),
            type,
            reason,
            message,
        )

    def log(self, level: str, message: str) -> None:
        """Write a line to the host's log, tagged with the guest and the request (see also
        :mod:`krec_guest.log` and Python's ``logging``, which the SDK forwards to the host)."""
        if level not in LEVELS:
            raise ValueError(f"log level {level!r}: expected one of {', '.join(LEVELS)}")
        self._host.log(level, message)

"""Reconcilers: :class:`Reconciler`, the :class:`Request` it is given and the :class:`Action` it
returns (controller-runtime's ``reconcile.Request`` and ``reconcile.Result``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional

from .action import Action

if TYPE_CHECKING:
    from .context import Context
    from .kinds import Kind


@dataclass(frozen=True)
class Request:
    """The key of the object to reconcile. The object may be gone already: a reconciler reads
    the current state instead of trusting events."""

    namespace: Optional[str]
    name: str

    @staticmethod
    def cluster(name: str) -> "Request":
        """A request for a cluster-scoped object."""
        return Request(None, name)

    @staticmethod
    def of(obj: Mapping[str, Any]) -> "Request":
        """The request for ``obj``."""
        meta = obj.get("metadata") or {}
        return Request(meta.get("namespace"), meta.get("name", ""))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class Reconciler:
    """A reconciler: subclass it and implement :meth:`reconcile`.

    The host builds one instance per worker. Its ``__init__`` takes either nothing or one
    argument, the manifest's ``spec.config`` (parsed JSON: a ``dict``, or ``None`` when the
    manifest has none); raise an exception there to reject a configuration — the host then keeps
    the version running before and says why.
    """

    def reconcile(self, req: Request, ctx: "Context") -> Optional[Action]:
        """Bring the cluster state for ``req`` towards its desired state. Return an
        :class:`Action` (``None`` is :meth:`Action.done`); raise to fail the reconcile, which is
        logged and retried with backoff. It must be idempotent: the same request may come again."""
        raise NotImplementedError("this reconciler does not implement reconcile")

    def map(self, kind: "Kind", obj: dict) -> list[Request]:
        """For watches with ``mapByGuest: true``: the requests an event on ``obj`` (of ``kind``)
        causes (controller-runtime's ``EnqueueRequestsFromMapFunc``). Declared with a fourth
        parameter — ``map(self, kind, obj, ctx)`` — it is given a :class:`Context` to read the
        cluster through (from the host's cache; writes are refused): a Namespace appearing,
        mapped to the objects that name it."""
        raise NotImplementedError(f"this reconciler maps no {kind.kind}: implement Reconciler.map")

"""What a reconcile returns: :class:`Action` (controller-runtime's ``reconcile.Result``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Action:
    """What the host does with the request after a successful reconcile."""

    #: ``done``, ``requeue`` or ``requeue-after``.
    kind: str = "done"
    #: For ``requeue-after``: after how many seconds.
    after: float = 0.0

    @staticmethod
    def done() -> "Action":
        """The object is in its desired state: forget the key's backoff."""
        return Action("done")

    @staticmethod
    def requeue() -> "Action":
        """Reconcile the key again soon, through the rate limiter."""
        return Action("requeue")

    @staticmethod
    def requeue_after(seconds: float) -> "Action":
        """Reconcile the key again after ``seconds``."""
        if seconds < 0:
            raise ValueError("requeue_after: seconds must not be negative")
        return Action("requeue-after", float(seconds))

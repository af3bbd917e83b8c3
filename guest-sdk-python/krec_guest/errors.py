"""Why a host call or a reconcile failed: one exception per case of the WIT ``error`` variant.

Every exception a host call raises is a :class:`KrecError`; catch the one you expect::

    try:
        ctx.create(deployment)
    except AlreadyExists:
        pass

A reconciler may raise them too (or any other exception): the reconcile fails, is logged and
counted, and the request is retried with backoff.
"""

from __future__ import annotations


class KrecError(Exception):
    """A failed host call or reconcile. ``message`` says why, for people."""

    #: The WIT ``error`` case this class stands for.
    case = "other"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(KrecError):
    """The object does not exist."""

    case = "not-found"


class AlreadyExists(KrecError):
    """``create`` of an object whose name is taken."""

    case = "already-exists"


class Conflict(KrecError):
    """The object changed since it was read (stale resourceVersion) or a precondition failed:
    read it again and retry."""

    case = "conflict"


class Forbidden(KrecError):
    """The guest's manifest does not permit the call, or the API server refused it."""

    case = "forbidden"


class Invalid(KrecError):
    """The object or arguments are malformed (bad JSON, failed validation, bad selector)."""

    case = "invalid"


class Timeout(KrecError):
    """The call or the reconcile took too long."""

    case = "timeout"


class Unavailable(KrecError):
    """The API server could not be reached or is not ready: retry later."""

    case = "unavailable"


class Other(KrecError):
    """Anything else."""

    case = "other"


#: The exception class of each WIT error case.
BY_CASE: dict[str, type[KrecError]] = {
    cls.case: cls
    for cls in (NotFound, AlreadyExists, Conflict, Forbidden, Invalid, Timeout, Unavailable, Other)
}

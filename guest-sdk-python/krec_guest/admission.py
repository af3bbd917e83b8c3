"""Admission webhooks: :class:`Validator`, :class:`Mutator` and :class:`Converter`, the
:class:`AdmissionRequest` they judge and the :class:`Verdict` they answer."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from .kinds import Kind

if TYPE_CHECKING:
    from .context import Context

CREATE, UPDATE, DELETE, CONNECT = "CREATE", "UPDATE", "DELETE", "CONNECT"


@dataclass(frozen=True)
class UserInfo:
    """Who makes the request."""

    username: str = "krec-test"
    groups: tuple[str, ...] = ()


class AdmissionRequest:
    """One admission request (``AdmissionReview.request``). Its objects are parsed on first use:
    a validator that reads only ``object`` never pays for ``old_object``."""

    def __init__(
        self,
        *,
        kind: Kind,
        resource: str,
        operation: str,
        name: Optional[str] = None,
        namespace: Optional[str] = None,
        object_json: Optional[str] = None,
        old_object_json: Optional[str] = None,
        uid: str = "",
        sub_resource: Optional[str] = None,
        user: UserInfo = UserInfo(),
        dry_run: bool = False,
    ) -> None:
        #: Identifies the request (the host answers with it).
        self.uid = uid
        #: The object's kind.
        self.kind = kind
        #: The resource's plural, e.g. ``pods``.
        self.resource = resource
        #: The subresource, e.g. ``status``.
        self.sub_resource = sub_resource
        #: The object's name (``None`` for a create with only ``generateName``).
        self.name = name
        #: The object's namespace.
        self.namespace = namespace
        #: ``CREATE``, ``UPDATE``, ``DELETE`` or ``CONNECT``.
        self.operation = operation
        #: Who makes it.
        self.user = user
        #: The request will not be persisted: no side effects.
        self.dry_run = dry_run
        self._texts = {"object": object_json, "old_object": old_object_json}
        self._parsed: dict[str, Any] = {}

    def _parse(self, which: str) -> Optional[dict]:
        if which not in self._parsed:
            text = self._texts[which]
            self._parsed[which] = None if text is None else json.loads(text)
        return self._parsed[which]

    @property
    def object(self) -> Optional[dict]:
        """The new object (``None`` for a delete)."""
        return self._parse("object")

    @property
    def old_object(self) -> Optional[dict]:
        """The stored object (``None`` for a create)."""
        return self._parse("old_object")

    # Reviews for tests (the host builds them from the API server's for a running guest).

    @staticmethod
    def create(obj: dict, **options: Any) -> "AdmissionRequest":
        """A review of creating ``obj`` (options: ``user``, ``dry_run``, ``resource``, ``uid``)."""
        return AdmissionRequest._for(CREATE, obj, None, options)

    @staticmethod
    def update(old: dict, new: dict, **options: Any) -> "AdmissionRequest":
        """A review of replacing ``old`` with ``new``."""
        return AdmissionRequest._for(UPDATE, new, old, options)

    @staticmethod
    def delete(obj: dict, **options: Any) -> "AdmissionRequest":
        """A review of deleting ``obj``."""
        return AdmissionRequest._for(DELETE, None, obj, options)

    @staticmethod
    def _for(
        operation: str, new: Optional[dict], old: Optional[dict], options: dict
    ) -> "AdmissionRequest":
        subject = new if new is not None else old
        assert subject is not None
        meta = subject.get("metadata") or {}
        kind = Kind.of(subject)
        return AdmissionRequest(
            kind=kind,
            resource=options.pop("resource", kind.kind.lower() + "s"),
            operation=operation,
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            object_json=None if new is None else json.dumps(new),
            old_object_json=None if old is None else json.dumps(old),
            **options,
        )


@dataclass
class Verdict:
    """A webhook's answer: allowed, or denied with a message (and an HTTP code and reason),
    with warnings for the client either way."""

    allowed: bool = True
    #: The HTTP code of a denial (400 when ``None``, as kube-apiserver answers).
    code: Optional[int] = None
    #: Why, for people: kubectl shows ``admission webhook "NAME" denied the request: MESSAGE``.
    message: Optional[str] = None
    #: Why, for machines: a Kubernetes ``StatusReason`` (``Invalid``, ``Forbidden``, …).
    reason: Optional[str] = None
    #: Warnings for the client (kubectl prints them).
    warnings: list[str] = field(default_factory=list)
    #: Annotations for the audit log.
    audit_annotations: list[tuple[str, str]] = field(default_factory=list)

    @staticmethod
    def allow() -> "Verdict":
        """Allow the request."""
        return Verdict(True)

    @staticmethod
    def deny(message: str, code: Optional[int] = None, reason: Optional[str] = None) -> "Verdict":
        """Deny the request with ``message`` (HTTP 400 unless ``code``)."""
        return Verdict(False, code, message, reason)

    @staticmethod
    def invalid(message: str) -> "Verdict":
        """Deny as invalid: 422 ``Invalid``, what kube-apiserver answers for a bad field."""
        return Verdict(False, 422, message, "Invalid")

    def with_warning(self, warning: str) -> "Verdict":
        """This verdict with a warning for the client."""
        self.warnings.append(warning)
        return self

    def with_audit_annotation(self, key: str, value: str) -> "Verdict":
        """This verdict with an audit annotation."""
        self.audit_annotations.append((key, value))
        return self


class Validator:
    """A validating webhook (controller-runtime's ``CustomValidator``): subclass it and implement
    :meth:`validate`. Configuration as for :class:`~krec_guest.Reconciler`.

    To let the webhook's ``failurePolicy`` decide instead (the check itself failed, e.g. a read
    from the cache), raise: the review traps and the API server is answered HTTP 500."""

    def validate(self, req: AdmissionRequest, ctx: "Context") -> Verdict:
        """Judge ``req``."""
        raise NotImplementedError("this validator does not implement validate")


class Mutator:
    """A mutating webhook (controller-runtime's ``CustomDefaulter``): subclass it and implement
    :meth:`mutate`, changing ``obj`` in place. The host answers the API server with the JSON
    patch from the request's object to the one ``mutate`` leaves."""

    def mutate(self, req: AdmissionRequest, obj: dict, ctx: "Context") -> Verdict:
        """Change ``obj`` (a copy of the request's new object) as needed and judge ``req``."""
        raise NotImplementedError("this mutator does not implement mutate")


class Converter:
    """A CRD conversion webhook: subclass it and implement :meth:`convert`. Name the CRD in the
    manifest (``spec.conversion: {crd: widgets.example.com}``)."""

    def convert(self, obj: dict, desired_api_version: str) -> dict:
        """``obj`` in ``desired_api_version``; raise to fail the whole conversion."""
        raise NotImplementedError("this converter does not implement convert")


def mutated(mutator: Mutator, req: AdmissionRequest, ctx: "Context") -> tuple[Verdict, Optional[dict]]:
    """Run ``mutator`` on a copy of ``req``'s object: its verdict, and the object it left when
    that differs from the request's (``None``: unchanged, or a delete)."""
    original = req.object
    if original is None:
        return Verdict.allow(), None
    obj = copy.deepcopy(original)
    verdict = mutator.mutate(req, obj, ctx)
    return verdict, (None if obj == original else obj)

"""The WebAssembly side: the host's WIT imports as a :class:`~krec_guest.context.Host`, and the
``WitWorld`` class componentize-py exports. Imported only inside a component (``wit_world`` is
the bindings componentize-py generates from the ``controller`` world)."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

import wit_world
from componentize_py_types import Err
from wit_world.imports import admission_types, client, events, types
from wit_world.imports import log as wit_log

from .admission import AdmissionRequest, UserInfo, Verdict
from .errors import BY_CASE, KrecError
from .dev import DevGuest
from .guest import ConfigError, Guest, describe
from .kinds import Kind
from .reconciler import Action, Request

_ERRORS = {
    "not-found": types.Error_NotFound,
    "already-exists": types.Error_AlreadyExists,
    "conflict": types.Error_Conflict,
    "forbidden": types.Error_Forbidden,
    "invalid": types.Error_Invalid,
    "timeout": types.Error_Timeout,
    "unavailable": types.Error_Unavailable,
    "other": types.Error_Other,
}
_CASES = {cls: case for case, cls in _ERRORS.items()}
_PATCH_TYPES = {
    "merge": types.PatchType.MERGE,
    "json": types.PatchType.JSON,
    "strategic": types.PatchType.STRATEGIC,
    "apply": types.PatchType.APPLY,
}
_LEVELS = {
    "trace": wit_log.Level.TRACE,
    "debug": wit_log.Level.DEBUG,
    "info": wit_log.Level.INFO,
    "warn": wit_log.Level.WARN,
    "error": wit_log.Level.ERROR,
}
_OPERATIONS = {
    admission_types.Operation.CREATE: "CREATE",
    admission_types.Operation.UPDATE: "UPDATE",
    admission_types.Operation.DELETE: "DELETE",
    admission_types.Operation.CONNECT: "CONNECT",
}


def _gvk(kind: Kind) -> types.Gvk:
    return types.Gvk(kind.group, kind.version, kind.kind)


def _call(function: Callable[..., Any], *args: Any) -> Any:
    """Call a host import, raising its WIT error as the SDK's exception."""
    try:
        return function(*args)
    except Err as err:
        value = err.value
        raise BY_CASE[_CASES.get(type(value), "other")](getattr(value, "value", str(value))) from None


def _wit_error(err: KrecError) -> Err:
    return Err(_ERRORS.get(err.case, types.Error_Other)(err.message))


class WasmHost:
    """krec, through the component's imports."""

    def get(self, kind: Kind, namespace: Optional[str], name: str) -> str:
        return _call(client.get, _gvk(kind), namespace, name)

    def list(self, kind, namespace, label_selector, field_selector, uncached) -> list[str]:
        options = types.ListOptions(namespace, label_selector, field_selector, uncached)
        return _call(client.list, _gvk(kind), options)

    def create(self, obj: str) -> str:
        return _call(client.create, obj)

    def update(self, obj: str, status: bool) -> str:
        return _call(client.update_status if status else client.update, obj)

    def patch(self, kind, namespace, name, how, body, status) -> str:
        return _call(client.patch, _gvk(kind), namespace, name, _PATCH_TYPES[how], body, status)

    def delete(self, kind, namespace, name, uid, resource_version) -> None:
        preconditions = None
        if uid is not None or resource_version is not None:
            preconditions = types.Preconditions(uid, resource_version)
        _call(client.delete, _gvk(kind), namespace, name, preconditions)

    def record_event(self, kind, namespace, name, uid, type, reason, message) -> None:
        regarding = events.ObjectReference(_gvk(kind), namespace, name, uid)
        event_type = events.EventType.WARNING if type == "Warning" else events.EventType.NORMAL
        _call(events.record, regarding, event_type, reason, message)

    def log(self, level: str, message: str) -> None:
        wit_log.log(_LEVELS.get(level, wit_log.Level.INFO), message)


_HOST = WasmHost()


def _action(action: Action) -> types.Action:
    if action.kind == "requeue":
        return types.Action_Requeue()
    if action.kind == "requeue-after":
        return types.Action_RequeueAfter(int(action.after * 1000))
    return types.Action_Done()


def _request(req: admission_types.AdmissionRequest) -> AdmissionRequest:
    return AdmissionRequest(
        uid=req.uid,
        kind=Kind.from_gvk(req.kind.group, req.kind.version, req.kind.kind),
        resource=req.resource,
        sub_resource=req.sub_resource,
        name=req.name,
        namespace=req.namespace,
        operation=_OPERATIONS.get(req.operation, "CONNECT"),
        user=UserInfo(req.user_info.username, tuple(req.user_info.groups)),
        object_json=req.object,
        old_object_json=req.old_object,
        dry_run=req.dry_run,
    )


def _verdict(verdict: Verdict, patched: Optional[dict]) -> admission_types.Verdict:
    return admission_types.Verdict(
        verdict.allowed,
        verdict.code,
        verdict.message,
        verdict.reason,
        list(verdict.warnings),
        [(str(k), str(v)) for k, v in verdict.audit_annotations],
        None if patched is None else json.dumps(patched, separators=(",", ":")),
    )


def world(guest: "Guest | DevGuest") -> type:
    """The ``WitWorld`` class exporting ``guest``."""

    class WitWorld(wit_world.WitWorld):
        #: The guest it exports (what a dev build's loader takes from the application).
        parts = guest

        def init(self, config: str) -> None:
            try:
                guest.init(config)
            except ConfigError as err:
                raise Err(str(err)) from None

        def reconcile(self, req: types.Request) -> types.Action:
            try:
                return _action(guest.reconcile(_HOST, Request(req.namespace, req.name)))
            except KrecError as err:
                raise _wit_error(err) from None

        def map(self, kind: types.Gvk, object: str) -> list[types.Request]:
            try:
                obj = json.loads(object)
                mapped = guest.map(_HOST, Kind.from_gvk(kind.group, kind.version, kind.kind), obj)
            except KrecError as err:
                raise _wit_error(err) from None
            except ValueError as err:
                raise Err(types.Error_Invalid(f"the {kind.kind} to map does not decode: {err}")) from None
            return [types.Request(r.namespace, r.name) for r in mapped]

        def validate(self, request: admission_types.AdmissionRequest) -> admission_types.Verdict:
            return _verdict(guest.validate(_HOST, _request(request)), None)

        def mutate(self, request: admission_types.AdmissionRequest) -> admission_types.Verdict:
            verdict, patched = guest.mutate(_HOST, _request(request))
            return _verdict(verdict, patched)

        def convert(self, objects: list[str], desired_api_version: str) -> list[str]:
            try:
                return guest.convert(_HOST, objects, desired_api_version)
            except ValueError as err:
                raise Err(describe(err) if not str(err) else str(err)) from None

    return WitWorld

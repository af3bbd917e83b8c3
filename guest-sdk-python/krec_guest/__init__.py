"""krec guests in Python: reconcilers and admission webhooks compiled to WebAssembly components
(with componentize-py) that krec runs beside Rust and TypeScript guests.

A reconciler::

    from krec_guest import Action, Context, Reconciler, Request, export
    from krec_guest.kinds import ReplicaSet

    class Labeller(Reconciler):
        def reconcile(self, req: Request, ctx: Context) -> Action:
            rs = ctx.get_opt(ReplicaSet, req.name, req.namespace)
            if rs is None:
                return Action.done()
            labels = rs["metadata"].setdefault("labels", {})
            if labels.get("seen") != "yes":
                labels["seen"] = "yes"
                ctx.update(rs)
            return Action.done()

    WitWorld = export(reconciler=Labeller)

Build it with ``python -m krec_guest.build app -o labeller.wasm`` and name the ``.wasm`` in a
manifest as for any guest. Unit-test it without WebAssembly with :mod:`krec_guest.testing`.
"""

from __future__ import annotations

import importlib.util
from typing import Optional

from . import kinds, log
from .admission import (
    AdmissionRequest,
    Converter,
    Mutator,
    UserInfo,
    Validator,
    Verdict,
)
from .context import Context
from .errors import (
    AlreadyExists,
    Conflict,
    Forbidden,
    Invalid,
    KrecError,
    NotFound,
    Other,
    Timeout,
    Unavailable,
)
from .guest import Guest
from .kinds import Kind
from .reconciler import Action, Reconciler, Request

__all__ = [
    "Action",
    "AdmissionRequest",
    "AlreadyExists",
    "Conflict",
    "Context",
    "Converter",
    "Forbidden",
    "Guest",
    "Invalid",
    "Kind",
    "KrecError",
    "Mutator",
    "NotFound",
    "Other",
    "Reconciler",
    "Request",
    "Timeout",
    "Unavailable",
    "UserInfo",
    "Validator",
    "Verdict",
    "export",
    "kinds",
    "log",
]


def export(
    reconciler: Optional[type] = None,
    validator: Optional[type] = None,
    mutator: Optional[type] = None,
    converter: Optional[type] = None,
) -> type:
    """The guest's ``WitWorld`` (what componentize-py exports): assign it to ``WitWorld`` in the
    guest's main module. Each argument is a class; the host builds one instance of each per
    worker, from the manifest's ``spec.config`` when its ``__init__`` takes an argument.

    Outside WebAssembly (in unit tests) the class it returns refuses to run: test the parts
    with :class:`krec_guest.testing.FakeCluster`."""
    guest = Guest(reconciler, validator, mutator, converter)
    if importlib.util.find_spec("wit_world") is None:
        return _native(guest)
    from . import _wasm

    log.forward_logging()
    return _wasm.world(guest)


def _native(guest: Guest) -> type:
    class WitWorld:
        """Stands for the exports outside WebAssembly."""

        parts = guest

        def __getattr__(self, name: str):
            raise RuntimeError(
                "this guest runs inside WebAssembly only: build it with `python -m krec_guest.build`, "
                "or test its parts with krec_guest.testing.FakeCluster"
            )

    return WitWorld

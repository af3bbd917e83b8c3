"""A guest's parts (reconciler, validator, mutator, converter), built from its configuration and
called for the host: what the WebAssembly exports and the fake cluster share."""

from __future__ import annotations

import inspect
import json
import traceback
from typing import Any, Optional

from . import log as _log
from .admission import AdmissionRequest, Converter, Mutator, Validator, Verdict, mutated
from .context import Context, Host
from .errors import Invalid, KrecError, Other
from .kinds import Kind
from .reconciler import Action, Reconciler, Request

PARTS = ("reconciler", "validator", "mutator", "converter")
_BASES = {"reconciler": Reconciler, "validator": Validator, "mutator": Mutator, "converter": Converter}


class ConfigError(Exception):
    """A configuration the guest refuses: the host keeps the version running before."""


def takes_config(cls: type) -> bool:
    """Whether ``cls(config)`` is how ``cls`` is built: its ``__init__`` takes an argument."""
    init = cls.__init__
    if init is object.__init__:
        return False
    params = [
        p
        for p in list(inspect.signature(init).parameters.values())[1:]
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return bool(params)


def describe(err: BaseException) -> str:
    """``err`` for a log line or an error message: its type (unless a krec error), its text and
    where in the guest's code it was raised."""
    text = str(err) if isinstance(err, KrecError) else f"{type(err).__name__}: {err}"
    frames = traceback.extract_tb(err.__traceback__)
    # The innermost frame outside the SDK is the guest author's line.
    mine = [f for f in frames if "krec_guest" not in f.filename.replace("\\", "/").split("/")]
    if mine:
        frame = mine[-1]
        text += f" (at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name})"
    return text


class Guest:
    """The classes of a guest's parts and, once :meth:`init` ran, their instances."""

    def __init__(
        self,
        reconciler: Optional[type] = None,
        validator: Optional[type] = None,
        mutator: Optional[type] = None,
        converter: Optional[type] = None,
    ) -> None:
        self.classes: dict[str, Optional[type]] = {
            "reconciler": reconciler,
            "validator": validator,
            "mutator": mutator,
            "converter": converter,
        }
        for part, cls in self.classes.items():
            if cls is not None and not (isinstance(cls, type) and issubclass(cls, _BASES[part])):
                raise TypeError(
                    f"export({part}=…) takes a subclass of krec_guest.{_BASES[part].__name__}, not {cls!r}"
                )
        if all(cls is None for cls in self.classes.values()):
            raise TypeError("export() needs a reconciler, validator, mutator or converter")
        self.parts: dict[str, Any] = {}

    def init(self, config: str) -> None:
        """Build every part from the manifest's ``spec.config`` (JSON text; ``null`` for none).
        A second ``init`` keeps the first's parts. Raises :class:`ConfigError`."""
        if self.parts:
            return
        try:
            settings = json.loads(config)
        except ValueError as err:
            raise ConfigError(f"spec.config: not JSON: {err}") from None
        present = {part: cls for part, cls in self.classes.items() if cls is not None}
        any_takes = any(takes_config(cls) for cls in present.values())
        if not any_takes and settings not in (None, {}):
            raise ConfigError(
                "spec.config: this guest takes no configuration: remove spec.config, or give the "
                "reconciler (or a webhook) an __init__(self, config)"
            )
        built = {}
        for part, cls in present.items():
            try:
                built[part] = cls(settings) if takes_config(cls) else cls()
            except Exception as err:  # noqa: BLE001 - any refusal is the configuration's
                raise ConfigError(f"spec.config: {describe(err)}") from None
        self.parts = built

    def part(self, name: str) -> Any:
        """The built part ``name`` (built without configuration if ``init`` never ran: a host
        older than WIT 0.1.2), or ``None`` when the guest has none."""
        if not self.parts:
            self.init("null")
        return self.parts.get(name)

    def reconcile(self, host: Host, req: Request) -> Action:
        """Run the reconciler for ``req``: its action, or a :class:`KrecError` (any other
        exception becomes :class:`~krec_guest.errors.Other`, naming where it was raised)."""
        reconciler = self._built(Invalid, "reconciler")
        if reconciler is None:
            raise Other("this guest exports no reconciler (export(reconciler=…))")
        with _log.installed(host):
            try:
                action = reconciler.reconcile(req, Context(host))
            except KrecError:
                raise
            except Exception as err:  # noqa: BLE001 - a failed reconcile, retried with backoff
                raise Other(describe(err)) from err
        if action is None:
            return Action.done()
        if not isinstance(action, Action):
            raise Other(f"reconcile returned {action!r}: return an Action (or None for done)")
        return action

    def map(self, host: Host, kind: Kind, obj: dict) -> list[Request]:
        """Run the reconciler's ``map`` for an event on ``obj``."""
        reconciler = self._built(Invalid, "reconciler")
        if reconciler is None:
            raise Other("this guest exports no reconciler (export(reconciler=…))")
        with _log.installed(host):
            try:
                # `map(self, kind, obj, ctx)` reads through a read-only context; `map(self, kind,
                # obj)` looks only at the object.
                if _takes_context(reconciler.map):
                    requests = list(reconciler.map(kind, obj, Context(host)))
                else:
                    requests = list(reconciler.map(kind, obj))
            except KrecError:
                raise
            except Exception as err:  # noqa: BLE001
                raise Other(describe(err)) from err
        for request in requests:
            if not isinstance(request, Request):
                raise Other(f"map returned {request!r}: return Requests")
        return requests

    def validate(self, host: Host, req: AdmissionRequest) -> Verdict:
        """Run the validator; an exception propagates (the review traps: failurePolicy decides)."""
        validator = self._built(RuntimeError, "validator")
        if validator is None:
            raise RuntimeError("this guest exports no validator (export(validator=…))")
        with _log.installed(host):
            return _verdict(validator.validate(req, Context(host)))

    def mutate(self, host: Host, req: AdmissionRequest) -> tuple[Verdict, Optional[dict]]:
        """Run the mutator: its verdict and the object it left (``None``: unchanged)."""
        mutator = self._built(RuntimeError, "mutator")
        if mutator is None:
            raise RuntimeError("this guest exports no mutator (export(mutator=…))")
        with _log.installed(host):
            verdict, obj = mutated(mutator, req, Context(host))
            return _verdict(verdict), obj

    def convert(self, host: Host, objects: list[str], desired: str) -> list[str]:
        """Convert each object to ``desired``; a ``ValueError`` names the first that fails."""
        converter = self._built(ValueError, "converter")
        if converter is None:
            raise ValueError("this guest exports no converter (export(converter=…))")
        converted = []
        with _log.installed(host):
            for text in objects:
                try:
                    converted.append(json.dumps(converter.convert(json.loads(text), desired)))
                except Exception as err:  # noqa: BLE001 - fails the whole conversion
                    raise ValueError(describe(err)) from None
        return converted

    def _built(self, error: type, name: str) -> Any:
        try:
            return self.part(name)
        except ConfigError as err:
            raise error(str(err)) from None


def _takes_context(method: Any) -> bool:
    """Whether a bound ``map`` takes a third argument (the context)."""
    try:
        params = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _verdict(verdict: Any) -> Verdict:
    if not isinstance(verdict, Verdict):
        raise TypeError(f"the webhook returned {verdict!r}: return a Verdict")
    return verdict

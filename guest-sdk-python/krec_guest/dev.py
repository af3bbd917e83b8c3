"""A dev build's loader: ``python -m krec_guest.build APP -o OUT --dev``.

A dev build is the guest's component — CPython, the SDK and everything the application imports,
pre-initialised — with this loader in the application's place. The application's own modules
are imported when an instance starts, from the source folder ``krec dev`` mounts read-only at
:data:`MOUNT` (the folder the build names in the component's ``krec-dev-source`` section). An
edit needs no build and no compile: ``krec dev`` sees the sources change, starts a new version of
the guest, and its instances import the edited files. A module the build did not see imported
(a new dependency) is not there at run time: build again.

Outside ``krec dev`` nothing is mounted and the guest refuses to start, saying so.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Optional

from .guest import ConfigError, Guest, describe

#: Where ``krec dev`` mounts a dev build's source folder.
MOUNT = "/krec-dev-source"


def _own_modules(folder: str) -> set[str]:
    """The top-level module and package names ``folder`` holds."""
    names = set()
    for entry in os.listdir(folder):
        path = os.path.join(folder, entry)
        if entry.endswith(".py"):
            names.add(entry[:-3])
        elif os.path.isfile(os.path.join(path, "__init__.py")):
            names.add(entry)
    return names


class DevGuest:
    """Stands for the application's :class:`~krec_guest.guest.Guest`: loads it from the mounted
    sources at the first call of an instance, then hands every call to it."""

    def __init__(self, app: str, source: str, mount: str = MOUNT) -> None:
        self.app = app
        self.source = source
        self.mount = mount
        self.guest: Optional[Guest] = None

    def load(self) -> Guest:
        """The application's guest, imported afresh from the mount. Raises
        :class:`~krec_guest.guest.ConfigError` (the host keeps the version running before)."""
        if self.guest is not None:
            return self.guest
        if not os.path.isdir(self.mount):
            raise ConfigError(
                f"this is a dev build of {self.source} (built with --dev): it runs under `krec dev` "
                "only, which mounts its sources; build it without --dev for anything else"
            )
        # The modules the build imported from the sources go: the mounted files replace them.
        own = _own_modules(self.mount)
        for name in list(sys.modules):
            if name.split(".", 1)[0] in own:
                del sys.modules[name]
        if self.mount not in sys.path:
            sys.path.insert(0, self.mount)
        # Not importlib.invalidate_caches(): it imports importlib.metadata, which a build
        # rarely holds. The folder's finder is all there is to forget.
        sys.path_importer_cache.pop(self.mount, None)
        try:
            module = importlib.import_module(self.app)
        except SyntaxError as err:
            # Where it is is the error's own text: `invalid syntax (app.py, line 43)`.
            raise ConfigError(f"importing {self.app} from {self.source}: SyntaxError: {err}") from None
        except Exception as err:  # noqa: BLE001 - an edit that does not import is refused
            raise ConfigError(f"importing {self.app} from {self.source}: {describe(err)}") from None
        guest = getattr(getattr(module, "WitWorld", None), "parts", None)
        if not isinstance(guest, Guest):
            raise ConfigError(f"{self.app}: no `WitWorld = export(...)` in it")
        self.guest = guest
        return guest

    def init(self, config: str) -> None:
        self.load().init(config)

    def __getattr__(self, name: str) -> Any:
        # reconcile, map, validate, mutate, convert: the application's. Nothing else (the
        # build looks around the exported objects).
        if name not in ("reconcile", "map", "validate", "mutate", "convert", "part"):
            raise AttributeError(name)
        return getattr(self.load(), name)

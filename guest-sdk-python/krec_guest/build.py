"""Build a Python guest into a WebAssembly component: ``python -m krec_guest.build APP -o OUT``.

``APP`` is the guest's main module (``app`` for ``app.py``, which assigns ``WitWorld =
export(...)``); the folder holding it and this SDK are on the component's module path. Runs
componentize-py (``pip install componentize-py``) against the krec WIT shipped with the SDK.

``--dev`` builds for ``krec dev``'s edit loop (see :mod:`krec_guest.dev`): the component
imports the application from its source folder when it starts, so an edit runs without a build.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: The WIT world every Python guest implements (reconciler, webhooks, config and map).
WORLD = "controller"


def wit_dir() -> Path:
    """The krec WIT package the SDK was written against."""
    return Path(__file__).resolve().parent / "wit"


#: The custom section naming a dev build's source folder (the host's ``dev_source::SECTION``).
DEV_SECTION = "krec-dev-source"

#: The main module of a dev build: the application imported (so that everything it imports
#: is in the component), and the loader exported in its place.
DEV_MAIN = """import {app}  # noqa: F401 - what it imports is built in
from krec_guest import _wasm, dev

WitWorld = _wasm.world(dev.DevGuest({app!r}, {source!r}))
"""


def _leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def custom_section(name: str, data: bytes) -> bytes:
    """A WebAssembly custom section ``name`` holding ``data`` (valid at a component's end)."""
    body = _leb128(len(name.encode())) + name.encode() + data
    return b"\x00" + _leb128(len(body)) + body


def command(app: str, output: str, source: Path, *paths: Path) -> list[str]:
    """The componentize-py command that builds ``app`` (a module in ``source`` or ``paths``)
    into ``output``."""
    sdk = Path(__file__).resolve().parent.parent
    extra = [arg for path in paths for arg in ("--python-path", str(path))]
    return [
        sys.executable,
        "-c",
        "import sys; from componentize_py import script; sys.argv[0] = 'componentize-py'; sys.exit(script())",
        "--wit-path",
        str(wit_dir()),
        "--world",
        WORLD,
        "componentize",
        app,
        *extra,
        "--python-path",
        str(source),
        "--python-path",
        str(sdk),
        "--output",
        output,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m krec_guest.build", description="Build a Python krec guest into a component."
    )
    parser.add_argument("app", help="the guest's main module, e.g. app (for app.py)")
    parser.add_argument("-o", "--output", required=True, help="the component to write (.wasm)")
    parser.add_argument(
        "-C", "--directory", default=".", help="the folder holding the module (default: here)"
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help="build for krec dev's edit loop: the component imports the app from this folder "
        "when it starts, so edits run without building again (krec dev only)",
    )
    args = parser.parse_args(argv)
    app = args.app[:-3] if args.app.endswith(".py") else args.app
    source = Path(args.directory).resolve()
    if not (source / f"{app}.py").is_file() and not (source / app / "__init__.py").is_file():
        print(f"krec_guest.build: no module {app!r} in {source}", file=sys.stderr)
        return 2
    try:
        import componentize_py  # noqa: F401
    except ImportError:
        print(
            "krec_guest.build: componentize-py is not installed: pip install componentize-py==0.25.1",
            file=sys.stderr,
        )
        return 2
    output = Path(args.output)
    if output.parent != Path(""):
        output.parent.mkdir(parents=True, exist_ok=True)
    if not args.dev:
        result = subprocess.run(command(app, str(output), source), env=dict(os.environ))
    else:
        with tempfile.TemporaryDirectory(prefix="krec-dev-") as scratch:
            main = Path(scratch) / "krec_dev_main.py"
            main.write_text(DEV_MAIN.format(app=app, source=str(source)))
            result = subprocess.run(
                command("krec_dev_main", str(output), source, Path(scratch)), env=dict(os.environ)
            )
        if result.returncode == 0:
            with output.open("ab") as component:
                component.write(custom_section(DEV_SECTION, str(source).encode()))
    if result.returncode == 0:
        size = output.stat().st_size
        what = f"a dev build: edits to {source} run under krec dev without building" if args.dev else ""
        print(f"built {output} ({size / 1e6:.1f} MB){'; ' + what if what else ''}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

"""Build a Python guest into a WebAssembly component: ``python -m krec_guest.build APP -o OUT``.

``APP`` is the guest's main module (``app`` for ``app.py``, which assigns ``WitWorld =
export(...)``); the folder holding it and this SDK are on the component's module path. Runs
componentize-py (``pip install componentize-py``) against the krec WIT shipped with the SDK.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

#: The WIT world every Python guest implements (reconciler, webhooks, config and map).
WORLD = "controller"


def wit_dir() -> Path:
    """The krec WIT package the SDK was written against."""
    return Path(__file__).resolve().parent / "wit"


def command(app: str, output: str, source: Path) -> list[str]:
    """The componentize-py command that builds ``app`` (a module in ``source``) into ``output``."""
    sdk = Path(__file__).resolve().parent.parent
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
    result = subprocess.run(command(app, str(output), source), env=dict(os.environ))
    if result.returncode == 0:
        size = output.stat().st_size
        print(f"built {output} ({size / 1e6:.1f} MB)")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

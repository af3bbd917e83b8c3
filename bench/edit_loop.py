#!/usr/bin/env python3
"""The author's inner loop: from saving a guest's source to its first reconcile by the new
version under `krec dev`, as a guest author has it. By hand (`make bench-edit-loop`), not in CI.

Usage: bench/edit_loop.py [--krec PATH] [--edits N] [--before]

A copy of sample-guests/pod-counter-py (in a scratch folder, with the ReplicaSet example and a
log line each reconcile says) is built as the scaffold prints it, `krec dev` runs it, and each
edit changes the text of that log line: the time from the file's write to the new text in
`krec dev`'s log. `--before` builds and edits as before issue 56 — a full build after each edit
(`python -m krec_guest.build app -o …`), the host compiling the new component — to set beside it.

Prints each edit's seconds and their median.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".tools" / "venv" / "bin" / "python"
LOG_LINE = '        log.info(f"reconciling {req} (edit 0)")\n'


def project(scratch: Path) -> Path:
    """pod-counter-py, its manifest naming a module beside it, a log line per reconcile."""
    dest = scratch / "pod-counter-py"
    shutil.copytree(
        ROOT / "sample-guests" / "pod-counter-py", dest, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "sample-guests" / "pod-counter" / "examples", dest / "examples")
    manifest = dest / "manifest.yaml"
    manifest.write_text(
        re.sub(r"module: .*", "module: pod_counter_py.wasm", manifest.read_text(), count=1)
    )
    app = dest / "app.py"
    text = app.read_text()
    anchor = "        rs = ctx.get_opt(ReplicaSet, req.name, req.namespace)\n"
    assert anchor in text, "pod-counter-py's reconcile changed: update this bench"
    app.write_text(text.replace(anchor, LOG_LINE + anchor, 1))
    return dest


def build(dest: Path, dev: bool) -> None:
    command = [str(PYTHON), "-m", "krec_guest.build", "app", "-o", "pod_counter_py.wasm"]
    subprocess.run(command + (["--dev"] if dev else []), cwd=dest, check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--krec", default=str(ROOT / "target" / "release" / "krec"))
    parser.add_argument("--edits", type=int, default=7)
    parser.add_argument("--before", action="store_true", help="rebuild after each edit, no --dev")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="krec-edit-loop-") as scratch:
        scratch = Path(scratch)
        dest = project(scratch)
        build(dest, dev=not args.before)
        log = (scratch / "dev.log").open("w+")
        env = dict(os.environ, RUST_LOG="info", XDG_CACHE_HOME=str(scratch / "cache"))
        dev = subprocess.Popen(
            [args.krec, "dev", "--manifests", str(dest), "--kubeconfig-out", str(scratch / "kc.yaml"),
             "--admin-addr", "127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=log, env=env,
        )
        try:
            wait_for(scratch / "dev.log", "(edit 0)", 120)
            times = []
            app = dest / "app.py"
            for i in range(1, args.edits + 1):
                time.sleep(1.5)
                text = app.read_text()
                started = time.monotonic()
                app.write_text(re.sub(r"\(edit \d+\)", f"(edit {i})", text, count=1))
                if args.before:
                    build(dest, dev=False)
                wait_for(scratch / "dev.log", f"(edit {i})", 180)
                times.append(time.monotonic() - started)
                print(f"edit {i}: {times[-1]:.2f} s", flush=True)
        finally:
            dev.terminate()
            dev.wait(timeout=30)
    arm = "before (a full build per edit)" if args.before else "dev build"
    print(f"{arm}: median {statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f}) over {len(times)} edits")
    return 0


def wait_for(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise SystemExit(f"no {text!r} in krec dev's log within {timeout:.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The author's inner loop: from saving a guest's source to its first reconcile by the new
version under `krec dev`, as a guest author has it. By hand (`make bench-edit-loop`), not in CI.

Usage: bench/edit_loop.py [--lang python|typescript|go|rust] [--krec PATH] [--edits N]
                          [--compiler winch|cranelift] [--before]

A guest made by `krec new --lang LANG` (in a scratch folder, with a log line at the top of its
reconcile) is built and run as its next steps say, and each edit changes the text of that log
line: the time from the file's write to the new text in `krec dev`'s log.

- python: a dev build (`python -m krec_guest.build app -o … --dev`) once, then only edits;
  `--before` builds the component after each edit instead (as before issue 56).
- typescript: `npm run dev` (`krec-guest dev`: the dev build, esbuild rebuilding the bundle on
  every save, `krec dev` running it); `--before` runs `npm run build` after each edit and
  `krec dev` on the component.
- go: `krec build` after each edit (Go's build cache), the host compiling the new component.
- rust: `cargo build-guest` after each edit, the host compiling the new component.

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

# Per language: the source file, the line the log line goes after, the log line (with
# "(edit 0)" in it) and the command that builds the component after an edit (None: none).
LANGS = {
    "python": (
        "app.py",
        "    def reconcile(self, req: Request, ctx: Context) -> Action:\n",
        '        log.info("reconciling (edit 0)")\n',
    ),
    "typescript": (
        "src/app.ts",
        "  reconcile(req: Request, ctx: Context): Action {\n",
        '    log.info("reconciling (edit 0)");\n',
    ),
    "go": (
        "main.go",
        "func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {\n",
        '\tlog.FromContext(ctx).Info("reconciling (edit 0)")\n',
    ),
    "rust": (
        "src/lib.rs",
        "    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {\n",
        '        info!("reconciling (edit 0)");\n',
    ),
}


def scaffold(krec: str, lang: str, scratch: Path) -> Path:
    """`krec new guest --lang LANG`, with the log line added."""
    subprocess.run([krec, "new", "guest", "--lang", lang], cwd=scratch, check=True, stdout=subprocess.DEVNULL)
    dest = scratch / "guest"
    source, anchor, line = LANGS[lang]
    path = dest / source
    text = path.read_text()
    assert anchor in text, f"the {lang} template's reconcile changed: update this bench"
    path.write_text(text.replace(anchor, anchor + line, 1))
    return dest


def build(lang: str, dest: Path, env: dict, dev: bool, first: bool) -> None:
    """Build the component as the scaffold's next steps do (`first`: with the installs)."""
    commands = {
        "python": [[str(PYTHON), "-m", "krec_guest.build", "app", "-o", "guest.wasm"] + (["--dev"] if dev else [])],
        # `npm run dev` makes the dev build itself.
        "typescript": ([["npm", "install", "--no-audit", "--no-fund"]] if first else [])
        + ([] if dev else [["npm", "run", "build"]]),
        "go": [["krec", "build"]],
        "rust": [["cargo", "build-guest"]],
    }[lang]
    for command in commands:
        subprocess.run(command, cwd=dest, check=True, stdout=subprocess.DEVNULL, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lang", choices=sorted(LANGS), default="python")
    parser.add_argument("--krec", default=str(ROOT / "target" / "release" / "krec"))
    parser.add_argument("--edits", type=int, default=7)
    parser.add_argument("--compiler", choices=["winch", "cranelift"], default="winch")
    parser.add_argument("--before", action="store_true", help="python, typescript: a full build per edit")
    args = parser.parse_args()
    krec = str(Path(args.krec).resolve())
    with tempfile.TemporaryDirectory(prefix="krec-edit-loop-") as scratch:
        scratch = Path(scratch)
        dest = scaffold(krec, args.lang, scratch)
        env = dict(
            os.environ,
            RUST_LOG="info",
            XDG_CACHE_HOME=str(scratch / "cache"),
            KREC=krec,
            PATH=f"{Path(krec).parent}:{os.environ.get('PATH', '')}",
        )
        dev_build = not args.before and args.lang in ("python", "typescript")
        build(args.lang, dest, env, dev=dev_build, first=True)
        log = (scratch / "dev.log").open("w+")
        flags = ["--kubeconfig-out", str(scratch / "kc.yaml"), "--admin-addr", "127.0.0.1:0",
                 "--compiler", args.compiler]
        if args.lang == "typescript" and dev_build:
            command = ["npm", "run", "dev", "--", "--", *flags]
        else:
            command = [krec, "dev", "--manifests", ".", *flags]
        dev = subprocess.Popen(command, cwd=dest, stdout=log, stderr=log, env=env, start_new_session=True)
        try:
            wait_for(scratch / "dev.log", "(edit 0)", 300)
            times = []
            path = dest / LANGS[args.lang][0]
            for i in range(1, args.edits + 1):
                time.sleep(1.5)
                text = path.read_text()
                started = time.monotonic()
                path.write_text(re.sub(r"\(edit \d+\)", f"(edit {i})", text, count=1))
                if not dev_build:
                    build(args.lang, dest, env, dev=False, first=False)
                wait_for(scratch / "dev.log", f"(edit {i})", 180)
                times.append(time.monotonic() - started)
                print(f"edit {i}: {times[-1]:.2f} s", flush=True)
        finally:
            os.killpg(dev.pid, 15)
            dev.wait(timeout=30)
    arm = "a full build per edit" if args.before else ("dev build" if dev_build else "build per edit")
    print(
        f"{args.lang}, {arm}, {args.compiler}: median {statistics.median(times):.2f} s "
        f"({min(times):.2f}-{max(times):.2f}) over {len(times)} edits"
    )
    return 0


def wait_for(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise SystemExit(f"no {text!r} in krec dev's log within {timeout:.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""krec as envtest's control plane against kube-apiserver + etcd, side by side, by hand.

Usage: bench/envtest.py KREC_ASSETS REAL_ASSETS [ROUNDS]

KREC_ASSETS is a folder `krec envtest --dir` filled (use a release krec); REAL_ASSETS one
holding a real `kube-apiserver` and `etcd` (../shared/realk8s builds them; not in CI). The
arms alternate round by round on the same machine:

- start: envtest's Environment.Start() until ready (the project's CRD installed), and Stop()
  (tests/envtest/hack/starttime, 5 starts a round);
- suite: tests/envtest's two Ginkgo suites, compiled once (`go test -c`), run one after the
  other: wall time, and the peak of the control plane's memory (the summed RSS of the
  processes started as kube-apiserver and etcd, sampled every 20 ms).

Prints medians (min-max) and the krec / real ratios.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.join(ROOT, "tests", "envtest")
SUITES = ["internal/controller", "internal/webhook/v1"]


def control_plane_rss_kib(assets):
    """Summed RSS of the processes whose command line runs the entries of `assets` (krec's
    entries exec `krec kube-apiserver …` and `krec etcd …`)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv[:2]]
        ours = any(
            w.startswith(assets) or w in ("kube-apiserver", "etcd") for w in words
        )
        if not ours:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def run_suites(binaries, assets):
    """Wall seconds to run the compiled suites, and the control plane's peak RSS (MiB)."""
    env = dict(os.environ, KUBEBUILDER_ASSETS=assets)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], control_plane_rss_kib(assets))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.monotonic()
    try:
        for suite, binary in binaries:
            subprocess.run(
                [binary, "-test.count=1"],
                cwd=os.path.join(PROJECT, suite),
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        wall = time.monotonic() - began
    finally:
        done.set()
        sampler.join()
    return wall, peak[0] / 1024


def start_times(starttime, assets):
    env = dict(os.environ, KUBEBUILDER_ASSETS=assets)
    out = subprocess.run(
        [starttime, "-rounds", "5"], cwd=PROJECT, env=env, check=True,
        capture_output=True, text=True,
    ).stdout
    figures = {}
    for line in out.splitlines():
        name, _, median, _, low, _, high = line.split()
        figures[name] = (float(median), float(low), float(high))
    return figures


def summary(values):
    return statistics.median(values), min(values), max(values)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    arms = {"krec": os.path.abspath(sys.argv[1]), "real": os.path.abspath(sys.argv[2])}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    build = tempfile.mkdtemp(prefix="envtest-bench-")
    binaries = []
    for suite in SUITES:
        binary = os.path.join(build, suite.replace("/", "_") + ".test")
        subprocess.run(["go", "test", "-c", "-o", binary, "./" + suite], cwd=PROJECT, check=True)
        binaries.append((suite, binary))
    starttime = os.path.join(build, "starttime")
    subprocess.run(["go", "build", "-o", starttime, "./hack/starttime"], cwd=PROJECT, check=True)

    figures = {arm: {"start": [], "stop": [], "wall": [], "peak": []} for arm in arms}
    for _ in range(rounds):
        for arm, assets in arms.items():
            times = start_times(starttime, assets)
            figures[arm]["start"].append(times["start_ms"][0])
            figures[arm]["stop"].append(times["stop_ms"][0])
            wall, peak = run_suites(binaries, assets)
            figures[arm]["wall"].append(wall)
            figures[arm]["peak"].append(peak)

    print("| figure | krec | kube-apiserver + etcd | krec / real |")
    print("|---|---|---|---|")
    rows = [
        ("envtest Start() → ready, ms (median of 5 a round)", "start", "{:.0f}"),
        ("envtest Stop(), ms", "stop", "{:.0f}"),
        ("both suites' wall time, s", "wall", "{:.2f}"),
        ("control plane's peak RSS, MiB", "peak", "{:.0f}"),
    ]
    for label, key, fmt in rows:
        k = summary(figures["krec"][key])
        r = summary(figures["real"][key])
        cell = lambda s: f"{fmt.format(s[0])} ({fmt.format(s[1])}–{fmt.format(s[2])})"
        print(f"| {label} | {cell(k)} | {cell(r)} | {k[0] / r[0]:.2f}× |")


if __name__ == "__main__":
    main()

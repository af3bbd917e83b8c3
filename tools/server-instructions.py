#!/usr/bin/env python3
"""Instructions the embedded API server executes per write request, counted by callgrind.

Starts `krec cluster` (the binary given, default target/release/krec) under
`valgrind --tool=callgrind` with instrumentation off, sends WARMUP requests of each kind, switches
instrumentation on for COUNT sequential requests of one kind on one keep-alive connection, off
again, and prints the instructions per request. Repeatable to the instruction for the same
binary and load, whatever else the machine does.

    python3 tools/server-instructions.py [--binary PATH] [--count 300] [--warmup 50]
"""

import argparse
import base64
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "", "labels": {"app": "web"}},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {
                        "name": "web",
                        "image": "nginx:1.27",
                        "ports": [{"containerPort": 80}],
                        "env": [{"name": "MODE", "value": "bench"}],
                    }
                ]
            },
        },
    },
}

CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": ""},
    "data": {"a": "1", "b": "two", "c": "three three three"},
}


def start(binary, workdir):
    kubeconfig = os.path.join(workdir, "kubeconfig.yaml")
    out = os.path.join(workdir, "callgrind.out")
    # Builds from before the simulated cluster (the issue-11 baseline) have no controllers.
    help_text = subprocess.run([binary, "cluster", "--help"], capture_output=True, text=True).stdout
    quiet = ["--controllers", "none", "--nodes", "0"] if "--controllers" in help_text else []
    server = subprocess.Popen(
        [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}", binary, "cluster", *quiet,
            "--kubeconfig-out", kubeconfig,
        ],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    for line in server.stdout:
        match = re.search(r"https://([0-9.]+):(\d+)", line)
        if match:
            return server, match.group(1), int(match.group(2)), out
    sys.exit("krec cluster did not start")


def collect(pid, on):
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                   check=True, stdout=subprocess.DEVNULL)


def instructions(pid, out):
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)
    time.sleep(1)
    total = 0
    for name in os.listdir(os.path.dirname(out)):
        if name.startswith(os.path.basename(out)):
            with open(os.path.join(os.path.dirname(out), name)) as f:
                for line in f:
                    # `summary:` may stay 0 when instrumentation is switched on later.
                    if line.startswith("totals:"):
                        total += int(line.split()[1])
            os.remove(os.path.join(os.path.dirname(out), name))
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/krec")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        server, host, port, out = start(args.binary, workdir)
        try:
            conn = http.client.HTTPSConnection(
                host, port, context=ssl._create_unverified_context(), timeout=120)
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            counter = [0]

            def request(method, path, body, content_type="application/json"):
                headers["Content-Type"] = content_type
                conn.request(method, path, body=json.dumps(body), headers=headers)
                response = conn.getresponse()
                text = response.read()
                if response.status >= 300:
                    sys.exit(f"{method} {path}: {response.status} {text[:300]!r}")

            def create_deployment():
                counter[0] += 1
                body = json.loads(json.dumps(DEPLOYMENT))
                body["metadata"]["name"] = f"web-{counter[0]}"
                request("POST", "/apis/apps/v1/namespaces/default/deployments?fieldManager=bench", body)

            def patch_deployment():
                counter[0] += 1
                request("PATCH", "/apis/apps/v1/namespaces/default/deployments/web-1?fieldManager=bench",
                        {"metadata": {"annotations": {"n": str(counter[0])}}},
                        "application/merge-patch+json")

            def apply_deployment():
                counter[0] += 1
                body = json.loads(json.dumps(DEPLOYMENT))
                body["metadata"]["name"] = "web-1"
                body["metadata"]["annotations"] = {"n": str(counter[0])}
                request("PATCH", "/apis/apps/v1/namespaces/default/deployments/web-1?fieldManager=apply&force=true",
                        body, "application/apply-patch+yaml")

            def create_configmap():
                counter[0] += 1
                body = json.loads(json.dumps(CONFIGMAP))
                body["metadata"]["name"] = f"cm-{counter[0]}"
                request("POST", "/api/v1/namespaces/default/configmaps?fieldManager=bench", body)

            rows = []
            for name, step in [("Deployment create", create_deployment),
                               ("Deployment merge patch", patch_deployment),
                               ("Deployment server-side apply", apply_deployment),
                               ("ConfigMap create", create_configmap)]:
                for _ in range(args.warmup):
                    step()
                instructions(server.pid, out)
                collect(server.pid, True)
                for _ in range(args.count):
                    step()
                collect(server.pid, False)
                rows.append((name, instructions(server.pid, out) / args.count))
            for name, per in rows:
                print(f"{name}: {per:,.0f} instructions per request")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Regenerates apiserver/src/openapi/kubernetes-definitions.json, the OpenAPI definitions of the
built-in kinds the embedded API server serves (kubectl validates files and `kubectl explain`
reads them).

    python3 tools/openapi-definitions/extract.py SWAGGER_JSON OUT

SWAGGER_JSON is kube-apiserver's published OpenAPI v2 document of the Kubernetes version the
server reports (`api/openapi-spec/swagger.json` of kubernetes/kubernetes at that release; the
definitions are Kubernetes', Apache-2.0). Only `definitions` of the served groups are kept,
unchanged: descriptions, `x-kubernetes-group-version-kind`, list types and patch strategies.
Run by hand when the Kubernetes version moves, never by CI.
"""

import json
import re
import sys

# The stable groups the server serves, the apimachinery types they use, and apiextensions.
KEPT = re.compile(
    r"^io\.k8s\.("
    r"api\.(core|admissionregistration|apps|batch|autoscaling|coordination|discovery|events|networking|policy|rbac"
    r"|scheduling|storage)\.v[12]\."
    r"|apimachinery\."
    r"|apiextensions-apiserver\.pkg\.apis\.apiextensions\.v1\."
    r")"
)


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: extract.py SWAGGER_JSON OUT", file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        swagger = json.load(f)
    kept = {
        name: schema
        for name, schema in sorted(swagger["definitions"].items())
        if KEPT.match(name)
    }
    # One definition per line: small diffs when the Kubernetes version moves.
    lines = [
        json.dumps(name) + ":" + json.dumps(schema, separators=(",", ":"), sort_keys=True)
        for name, schema in kept.items()
    ]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"{sys.argv[2]}: {len(kept)} definitions")
    return 0


if __name__ == "__main__":
    sys.exit(main())

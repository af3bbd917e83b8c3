"""foo-validator, in Python: the same validating webhook as the Rust ``foo-validator`` and the
TypeScript ``foo-validator-ts`` (the cross-language tests and benchmarks run all three)."""

import json
import re

from krec_guest import AdmissionRequest, Context, Kind, Validator, Verdict, export

FOO = Kind("samplecontroller.k8s.io/v1alpha1", "Foo")
_LABEL = re.compile(r"^[a-z0-9-]+$")


def dns_subdomain_problem(name: str):
    """Why ``name`` is not a DNS-1123 subdomain, if it is not."""
    if name == "":
        return "must not be empty"
    if len(name.encode()) > 253:
        return "must be no more than 253 characters"
    valid = all(
        label and _LABEL.match(label) and not label.startswith("-") and not label.endswith("-")
        for label in name.split(".")
    )
    if valid:
        return None
    return (
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
        "'.', and must start and end with an alphanumeric character"
    )


def quote(text: str) -> str:
    """``text`` quoted as the Rust sample quotes it (``{:?}``)."""
    quoted = json.dumps(text, ensure_ascii=False)
    quoted = quoted.replace("\\u0000", "\\0")
    return re.sub(r"\\u00([0-9a-f]{2})", lambda m: "\\u{%x}" % int(m.group(1), 16), quoted)


def deployment_name(foo: dict) -> str:
    return (foo.get("spec") or {}).get("deploymentName") or ""


class FooValidator(Validator):
    def validate(self, req: AdmissionRequest, ctx: Context) -> Verdict:
        foo = req.object
        if foo is None:
            return Verdict.allow()
        wanted = deployment_name(foo)
        problem = dns_subdomain_problem(wanted)
        if problem:
            return Verdict.invalid(f"spec.deploymentName: Invalid value: {quote(wanted)}: {problem}")
        # A failed list raises: the review traps, so the API server's failurePolicy decides.
        others = ctx.list(FOO, namespace=req.namespace)
        me = (foo.get("metadata") or {}).get("name") or req.name
        for other in others:
            if deployment_name(other) == wanted and other["metadata"].get("name") != me:
                return Verdict.invalid(
                    f"spec.deploymentName: Duplicate value: {quote(wanted)}: already used by Foo "
                    f"{quote(other['metadata'].get('name', ''))} in namespace {quote(req.namespace or '')}"
                )
        return Verdict.allow()


WitWorld = export(validator=FooValidator)

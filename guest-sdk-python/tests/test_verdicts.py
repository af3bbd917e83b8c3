"""The fake cluster judges as the cluster does: the invalid objects of tests/verdicts/cases.json,
written through a guest's Context, get the verdicts the host gives under krec dev
(tests/verdicts/expected.json, which krec's own test holds the host and the Rust fake to)."""

import json
from pathlib import Path

from krec_guest import Context, KrecError
from krec_guest.testing import FakeCluster

REPO = Path(__file__).resolve().parents[2]
CASES = json.loads((REPO / "tests/verdicts/cases.json").read_text())
EXPECTED = json.loads((REPO / "tests/verdicts/expected.json").read_text())


def verdict(call, obj) -> str:
    try:
        call(obj)
    except KrecError as err:
        return f"{err.case}: {err}"
    return "ok"


def test_every_case_should_get_the_hosts_verdict():
    cluster = FakeCluster().add_files(*(REPO / crd for crd in CASES["crds"]))
    ctx = Context(cluster)
    got = []
    for case in CASES["cases"]:
        for before in case.get("before", []):
            ctx.create(before)
        call = ctx.update if case.get("call") == "update" else ctx.create
        got.append({"name": case["name"], "verdict": verdict(call, case["object"])})
    assert len(got) >= 20
    for have, want in zip(got, EXPECTED["verdicts"]):
        assert have == want
    assert len(got) == len(EXPECTED["verdicts"])

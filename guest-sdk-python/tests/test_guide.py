"""The Python in docs/guide.md runs as written: every ``python`` block executes, and the
reconciler it defines reconciles on the fake cluster."""

import re
from pathlib import Path

from krec_guest import Action, Request
from krec_guest.kinds import Deployment
from krec_guest.testing import FakeCluster

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_the_guide_should_have_python_and_every_block_should_run():
    found = blocks()
    assert found, f"no python block in {GUIDE}"
    for block in found:
        namespace: dict = {"__name__": "guide"}
        exec(compile(block, str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own code
        assert "WitWorld" in namespace, "a guide block defines no WitWorld"


def test_the_guides_reconciler_should_mark_a_deployment():
    namespace: dict = {"__name__": "guide"}
    exec(compile(blocks()[0], str(GUIDE), "exec"), namespace)  # noqa: S102
    marker = namespace["Marker"]({"annotation": "example.com/seen"})
    cluster = FakeCluster([{"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "web", "namespace": "default"},
                            "spec": {"selector": {"matchLabels": {"app": "web"}},
                                     "template": {"metadata": {"labels": {"app": "web"}},
                                                  "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}])
    assert cluster.reconcile(marker, Request("default", "web")) == Action.done()
    marked = cluster.object(Deployment, "web", "default")
    assert marked["metadata"]["annotations"] == {"example.com/seen": "seen"}

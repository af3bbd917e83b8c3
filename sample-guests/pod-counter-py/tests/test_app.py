"""pod-counter's unit tests: the reconciler against krec_guest's fake cluster, without Wasm."""

import pytest

from app import POD_COUNT_LABEL, PodCounter
from krec_guest import Action, Conflict, Request
from krec_guest.kinds import Pod, ReplicaSet
from krec_guest.testing import FakeCluster


def replicaset(name, selector, template_labels):
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": selector,
            "template": {"metadata": {"labels": template_labels}, "spec": {"containers": [CONTAINER]}},
        },
    }


CONTAINER = {"name": "app", "image": "registry.example/app:1"}


def pod(name, labels, namespace="default"):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [CONTAINER]},
    }


def count(cluster, name):
    return cluster.object(ReplicaSet, name, "default")["metadata"].get("labels", {}).get(POD_COUNT_LABEL)


def test_a_replicaset_should_be_labelled_with_the_number_of_its_pods():
    cluster = FakeCluster(
        [
            replicaset("web", {"matchLabels": {"app": "web"}}, {"app": "web"}),
            pod("web-1", {"app": "web"}),
            pod("web-2", {"app": "web"}),
            pod("api-1", {"app": "api"}),
            pod("web-elsewhere", {"app": "web"}, namespace="other"),
        ]
    )
    assert cluster.reconcile(PodCounter(), Request("default", "web")) == Action.done()
    assert count(cluster, "web") == "2"


def test_match_expressions_should_select_the_pods():
    cluster = FakeCluster(
        [
            replicaset(
                "web",
                {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]},
                {"tier": "fe"},
            ),
            pod("a", {"tier": "fe"}),
            pod("b", {"tier": "db"}),
        ]
    )
    cluster.reconcile(PodCounter(), Request("default", "web"))
    assert count(cluster, "web") == "1"


def test_an_unchanged_count_should_write_nothing():
    cluster = FakeCluster([replicaset("web", {"matchLabels": {"app": "web"}}, {"app": "web"}), pod("web-1", {"app": "web"})])
    cluster.reconcile(PodCounter(), Request("default", "web"))
    cluster.reconcile(PodCounter(), Request("default", "web"))
    assert [w[0] for w in cluster.writes] == ["update"]


def test_a_replicaset_that_is_gone_should_be_done():
    assert FakeCluster().reconcile(PodCounter(), Request("default", "gone")) == Action.done()


def test_a_conflict_should_fail_the_reconcile_so_it_is_retried():
    cluster = FakeCluster([replicaset("web", {"matchLabels": {"app": "web"}}, {"app": "web"})])
    cluster.fail_next("update", Conflict("the object has been modified"))
    with pytest.raises(Conflict):
        cluster.reconcile(PodCounter(), Request("default", "web"))
    assert count(cluster, "web") is None

"""The Python SDK natively: the context over the fake cluster, the glue's configuration and
error handling, selectors and patches."""

import filecmp
import json
from pathlib import Path

import pytest

from krec_guest import (
    Action,
    AdmissionRequest,
    AlreadyExists,
    Conflict,
    Context,
    Converter,
    Forbidden,
    Invalid,
    Kind,
    Mutator,
    NotFound,
    Other,
    Reconciler,
    Request,
    Validator,
    Verdict,
    export,
    kinds,
)
from krec_guest.guest import ConfigError, Guest
from krec_guest.patches import apply_json_patch, diff, merge
from krec_guest.selectors import matches, parse, selector_string
from krec_guest.testing import FakeCluster, resource


def cm(name, data=None, namespace="default", labels=None):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "data": data or {},
    }


# The context over the fake cluster.


def test_get_and_get_opt_should_find_stored_objects_and_raise_not_found_otherwise():
    ctx = Context(FakeCluster([cm("a", {"k": "v"})]))
    assert ctx.get(kinds.ConfigMap, "a", "default")["data"] == {"k": "v"}
    assert ctx.get_opt(kinds.ConfigMap, "b", "default") is None
    with pytest.raises(NotFound, match='configmaps "b" not found'):
        ctx.get(kinds.ConfigMap, "b", "default")


def test_create_should_stamp_honour_generate_name_and_refuse_a_taken_name():
    cluster = FakeCluster()
    ctx = Context(cluster)
    created = ctx.create(cm("a"))
    assert created["metadata"]["resourceVersion"] and created["metadata"]["uid"]
    generated = ctx.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-", "namespace": "default"}})
    assert generated["metadata"]["name"].startswith("x-") and len(generated["metadata"]["name"]) == 7
    with pytest.raises(AlreadyExists, match='configmaps "a" already exists'):
        ctx.create(cm("a"))
    with pytest.raises(Invalid):
        ctx.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})


def test_an_update_from_a_stale_read_should_conflict():
    ctx = Context(FakeCluster([cm("a")]))
    first = ctx.get(kinds.ConfigMap, "a", "default")
    first["data"] = {"k": "1"}
    updated = ctx.update(first)
    assert updated["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    first["data"] = {"k": "2"}
    with pytest.raises(Conflict, match="the object has been modified"):
        ctx.update(first)


def test_update_should_keep_the_status_of_kinds_with_a_status_subresource():
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "default"},
          "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                   "template": {"metadata": {"labels": {"app": "web"}},
                                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
          "status": {"replicas": 1}}
    cluster = FakeCluster([rs])
    ctx = Context(cluster)
    got = ctx.get(kinds.ReplicaSet, "web", "default")
    got["status"] = {"replicas": 9}
    got["spec"]["replicas"] = 2
    stored = ctx.update(got)
    assert stored["status"] == {"replicas": 1}
    assert stored["metadata"]["generation"] == 2
    stored["status"] = {"replicas": 2}
    assert ctx.update_status(stored)["status"] == {"replicas": 2}


def test_list_should_filter_by_namespace_labels_and_fields():
    cluster = FakeCluster([
        cm("a", labels={"app": "web", "tier": "fe"}),
        cm("b", labels={"app": "web", "tier": "be"}),
        cm("c", labels={"app": "db"}),
        cm("d", labels={"app": "web"}, namespace="other"),
    ])
    ctx = Context(cluster)
    names = lambda objs: sorted(o["metadata"]["name"] for o in objs)  # noqa: E731
    assert names(ctx.list(kinds.ConfigMap)) == ["a", "b", "c", "d"]
    assert names(ctx.list(kinds.ConfigMap, namespace="default", labels={"app": "web"})) == ["a", "b"]
    assert names(ctx.list(kinds.ConfigMap, labels="app=web,tier in (fe)")) == ["a"]
    assert names(ctx.list(kinds.ConfigMap, labels="tier notin (fe),app!=db")) == ["b", "d"]
    assert names(ctx.list(kinds.ConfigMap, labels="!tier")) == ["c", "d"]
    assert names(ctx.list(kinds.ConfigMap, fields="metadata.name=c")) == ["c"]
    assert names(ctx.list(kinds.ConfigMap, fields="metadata.namespace!=default")) == ["d"]
    with pytest.raises(Invalid, match="field label not supported"):
        ctx.list(kinds.ConfigMap, fields="spec.x=1")
    with pytest.raises(Invalid, match="invalid selector"):
        ctx.list(kinds.ConfigMap, labels="a in (")


def test_patches_should_merge_apply_json_operations_and_create_on_apply():
    cluster = FakeCluster([cm("a", {"k": "v", "gone": "x"})])
    ctx = Context(cluster)
    merged = ctx.patch(kinds.ConfigMap, "a", {"data": {"gone": None, "new": "1"}}, "default")
    assert merged["data"] == {"k": "v", "new": "1"}
    patched = ctx.patch(kinds.ConfigMap, "a", [{"op": "replace", "path": "/data/k", "value": "w"}], "default", type="json")
    assert patched["data"]["k"] == "w"
    applied = ctx.apply(cm("b", {"x": "y"}))
    assert applied["data"] == {"x": "y"}
    with pytest.raises(NotFound):
        ctx.patch(kinds.ConfigMap, "missing", {"data": {}}, "default")
    with pytest.raises(ValueError, match="patch type"):
        ctx.patch(kinds.ConfigMap, "a", {}, "default", type="yaml")


def test_delete_should_check_preconditions_and_only_mark_objects_with_finalizers():
    held = cm("held")
    held["metadata"]["finalizers"] = ["example.com/keep"]
    cluster = FakeCluster([cm("a"), held])
    ctx = Context(cluster)
    with pytest.raises(Conflict, match="Precondition failed"):
        ctx.delete(kinds.ConfigMap, "a", "default", uid="not-its-uid")
    ctx.delete(kinds.ConfigMap, "a", "default")
    assert cluster.object(kinds.ConfigMap, "a", "default") is None
    with pytest.raises(NotFound):
        ctx.delete(kinds.ConfigMap, "a", "default")
    ctx.delete(kinds.ConfigMap, "held", "default")
    marked = cluster.object(kinds.ConfigMap, "held", "default")
    assert marked["metadata"]["deletionTimestamp"]
    marked["metadata"]["finalizers"] = []
    ctx.update(marked)
    assert cluster.object(kinds.ConfigMap, "held", "default") is None


def test_finalizer_should_add_itself_apply_then_clean_up_and_let_the_object_go():
    cluster = FakeCluster([cm("a")])
    ctx = Context(cluster)
    done = []

    def step():
        obj = cluster.object(kinds.ConfigMap, "a", "default")
        return ctx.finalizer(
            obj,
            "example.com/cleanup",
            apply=lambda o: done.append(("apply", o["metadata"]["name"])),
            cleanup=lambda o: done.append(("cleanup", o["metadata"]["name"]))
            or Action.requeue_after(5),
        )

    # First the finalizer goes on, and nothing else happens in that reconcile.
    assert step() is None
    assert cluster.object(kinds.ConfigMap, "a", "default")["metadata"]["finalizers"] == [
        "example.com/cleanup"
    ]
    assert done == []
    assert step() is None
    assert done == [("apply", "a")]
    # Deleted: only marked while the finalizer is on; cleanup runs, the finalizer goes, and
    # with it the object.
    ctx.delete(kinds.ConfigMap, "a", "default")
    assert step() == Action.requeue_after(5)
    assert done[-1] == ("cleanup", "a")
    assert cluster.object(kinds.ConfigMap, "a", "default") is None


def test_a_failing_cleanup_should_keep_the_finalizer():
    held = cm("a")
    held["metadata"]["finalizers"] = ["example.com/cleanup"]
    cluster = FakeCluster([held])
    ctx = Context(cluster)
    ctx.delete(kinds.ConfigMap, "a", "default")

    def cleanup(_):
        raise Other("the bucket is away")

    with pytest.raises(Other):
        ctx.finalizer(
            cluster.object(kinds.ConfigMap, "a", "default"),
            "example.com/cleanup",
            apply=lambda o: None,
            cleanup=cleanup,
        )
    assert cluster.object(kinds.ConfigMap, "a", "default")["metadata"]["finalizers"] == [
        "example.com/cleanup"
    ]


def test_events_and_logs_should_be_recorded():
    class Noisy(Reconciler):
        def reconcile(self, req, ctx):
            obj = ctx.get(kinds.ConfigMap, req.name, req.namespace)
            ctx.record_event(obj, "Seen", "seen it", type="Warning")
            ctx.log("info", "hello")
            return Action.requeue_after(1.5)

    cluster = FakeCluster([cm("a")])
    assert cluster.reconcile(Noisy(), Request("default", "a")) == Action.requeue_after(1.5)
    assert [(e.type, e.reason, e.regarding["name"]) for e in cluster.events] == [("Warning", "Seen", "a")]
    assert cluster.logs == [("info", "hello")]


def test_injected_failures_should_reach_the_reconciler_once():
    cluster = FakeCluster([cm("a")]).fail_next("get", Other("the API server is away"), kind=kinds.ConfigMap)
    ctx = Context(cluster)
    with pytest.raises(Other):
        ctx.get(kinds.ConfigMap, "a", "default")
    assert ctx.get(kinds.ConfigMap, "a", "default")


def test_objects_that_are_not_json_should_fail_as_they_would_in_krec():
    with pytest.raises(TypeError):
        Context(FakeCluster()).create({**cm("a"), "data": {"k": {1, 2}}})


# Kinds, requests and actions.


def test_kinds_should_split_api_versions():
    assert (kinds.ReplicaSet.group, kinds.ReplicaSet.version) == ("apps", "v1")
    assert (kinds.Pod.group, kinds.Pod.version) == ("", "v1")
    assert Kind.from_gvk("", "v1", "Pod") == kinds.Pod
    assert Kind.of({"apiVersion": "apps/v1", "kind": "ReplicaSet"}) == kinds.ReplicaSet
    assert resource(kinds.ReplicaSet) == "replicasets.apps"
    assert resource(Kind("networking.k8s.io/v1", "NetworkPolicy")) == "networkpolicies.networking.k8s.io"


def test_requests_should_print_as_keys():
    assert str(Request("default", "web")) == "default/web"
    assert str(Request.cluster("node-1")) == "node-1"
    assert Request.of(cm("a")) == Request("default", "a")
    with pytest.raises(ValueError):
        Action.requeue_after(-1)


# The glue: configuration and errors.


class Plain(Reconciler):
    def reconcile(self, req, ctx):
        return None


class Configured(Reconciler):
    def __init__(self, config):
        if not config or "label" not in config:
            raise ValueError("label: required")
        self.label = config["label"]

    def reconcile(self, req, ctx):
        raise KeyError(self.label)


def test_a_guest_without_configuration_should_refuse_one():
    guest = Guest(reconciler=Plain)
    with pytest.raises(ConfigError, match="this guest takes no configuration"):
        guest.init('{"label": "x"}')
    Guest(reconciler=Plain).init("null")
    Guest(reconciler=Plain).init("{}")


def test_configuration_should_reach_the_constructor_and_its_refusal_name_the_field():
    with pytest.raises(ConfigError, match="spec.config: ValueError: label: required"):
        Guest(reconciler=Configured).init("{}")
    guest = Guest(reconciler=Configured)
    guest.init('{"label": "team"}')
    assert guest.part("reconciler").label == "team"
    # A second init keeps the first's parts.
    guest.init('{"label": "other"}')
    assert guest.part("reconciler").label == "team"


def test_a_part_without_configuration_should_be_built_without_it_when_another_takes_it():
    class Check(Validator):
        def validate(self, req, ctx):
            return Verdict.allow()

    guest = Guest(reconciler=Configured, validator=Check)
    guest.init('{"label": "x"}')
    assert isinstance(guest.part("validator"), Check)


def test_exceptions_should_become_errors_naming_where_they_were_raised():
    guest = Guest(reconciler=Configured)
    guest.init('{"label": "team"}')
    with pytest.raises(Other, match=r"KeyError: 'team' \(at test_sdk.py:\d+ in reconcile\)"):
        guest.reconcile(FakeCluster(), Request("default", "a"))


def test_a_reconcile_returning_something_else_should_fail():
    class Wrong(Reconciler):
        def reconcile(self, req, ctx):
            return "done"

    with pytest.raises(Other, match="return an Action"):
        Guest(reconciler=Wrong).reconcile(FakeCluster(), Request("default", "a"))


def test_missing_parts_should_say_so():
    guest = Guest(validator=Validator)
    with pytest.raises(Other, match="exports no reconciler"):
        guest.reconcile(FakeCluster(), Request("default", "a"))
    with pytest.raises(RuntimeError, match="exports no mutator"):
        guest.mutate(FakeCluster(), AdmissionRequest.create(cm("a")))
    with pytest.raises(ValueError, match="exports no converter"):
        guest.convert(FakeCluster(), ["{}"], "v2")
    with pytest.raises(TypeError, match="subclass of krec_guest.Reconciler"):
        Guest(reconciler=Validator)
    with pytest.raises(TypeError, match="needs a reconciler"):
        Guest()


def test_export_outside_webassembly_should_refuse_to_run():
    world = export(reconciler=Plain)
    assert isinstance(world.parts, Guest)
    with pytest.raises(RuntimeError, match="inside WebAssembly only"):
        world().reconcile


# Admission.


class Defaults(Mutator):
    def mutate(self, req, obj, ctx):
        obj["metadata"].setdefault("labels", {})["defaulted"] = "yes"
        return Verdict.allow().with_warning("labelled")


class Upgrade(Converter):
    def convert(self, obj, desired):
        if desired != "v2":
            raise ValueError(f"cannot convert to {desired}")
        return {**obj, "apiVersion": "example.com/v2"}


def test_a_mutator_should_answer_its_object_and_patch():
    mutated = FakeCluster().mutate(Defaults(), AdmissionRequest.create(cm("a")))
    assert mutated.verdict.warnings == ["labelled"]
    assert mutated.object["metadata"]["labels"]["defaulted"] == "yes"
    assert mutated.patch == [{"op": "add", "path": "/metadata/labels/defaulted", "value": "yes"}]
    deleted = FakeCluster().mutate(Defaults(), AdmissionRequest.delete(cm("a")))
    assert deleted.patch == [] and deleted.object is None


def test_the_glue_should_answer_a_changed_object_only():
    class Nothing(Mutator):
        def mutate(self, req, obj, ctx):
            return Verdict.allow()

    guest = Guest(mutator=Nothing)
    assert guest.mutate(FakeCluster(), AdmissionRequest.create(cm("a")))[1] is None
    guest = Guest(mutator=Defaults)
    assert guest.mutate(FakeCluster(), AdmissionRequest.create(cm("a")))[1]["metadata"]["labels"] == {"defaulted": "yes"}


def test_reviews_should_parse_their_objects_only_when_read():
    req = AdmissionRequest.update(cm("a", {"v": "1"}), cm("a", {"v": "2"}))
    assert req.operation == "UPDATE" and req.resource == "configmaps"
    assert req._parsed == {}
    assert req.object["data"] == {"v": "2"}
    assert "old_object" not in req._parsed
    assert req.old_object["data"] == {"v": "1"}


def test_verdicts_should_carry_codes_and_reasons():
    assert Verdict.invalid("bad") == Verdict(False, 422, "bad", "Invalid")
    assert Verdict.deny("no").code is None
    assert Verdict.allow().with_audit_annotation("k", "v").audit_annotations == [("k", "v")]


def test_a_converter_should_convert_each_object_or_fail_the_whole_conversion():
    guest = Guest(converter=Upgrade)
    out = guest.convert(FakeCluster(), [json.dumps({"apiVersion": "example.com/v1", "kind": "W"})], "v2")
    assert json.loads(out[0])["apiVersion"] == "example.com/v2"
    with pytest.raises(ValueError, match="cannot convert to v3"):
        guest.convert(FakeCluster(), ["{}"], "v3")


# Selectors and patches.


def test_selector_string_should_render_match_labels_and_expressions():
    assert selector_string({"matchLabels": {"app": "web"}, "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["fe", "be"]},
        {"key": "x", "operator": "NotIn", "values": ["1"]},
        {"key": "y", "operator": "Exists"},
        {"key": "z", "operator": "DoesNotExist"},
    ]}) == "app=web,tier in (be,fe),x notin (1),y,!z"
    assert selector_string({}) is None
    with pytest.raises(Invalid, match="unknown label selector operator"):
        selector_string({"matchExpressions": [{"key": "a", "operator": "Near"}]})


def test_selectors_should_match_as_kube_apiserver_does():
    assert matches("a=1", {"a": "1"}) and not matches("a=1", {})
    assert matches("a==1", {"a": "1"})
    assert matches("a!=1", {}) and not matches("a!=1", {"a": "1"})
    assert matches("a notin (1,2)", {}) and not matches("a notin (1,2)", {"a": "2"})
    assert matches(" a in (1, 2) , b ", {"a": "2", "b": ""})
    assert matches("", {"x": "y"}) and matches(None, None)
    assert len(parse("a,!b,c=d")) == 3


def test_patches_should_follow_their_rfcs():
    assert merge({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None}, "l": [2]}) == {"a": {"c": 2}, "l": [2]}
    doc = {"a": [1, 2], "b": {"c": 1}}
    assert apply_json_patch(doc, [{"op": "add", "path": "/a/-", "value": 3}])["a"] == [1, 2, 3]
    assert apply_json_patch(doc, [{"op": "move", "from": "/b/c", "path": "/d"}]) == {"a": [1, 2], "b": {}, "d": 1}
    assert apply_json_patch(doc, [{"op": "remove", "path": "/a/0"}])["a"] == [2]
    with pytest.raises(Invalid, match="test failed"):
        apply_json_patch(doc, [{"op": "test", "path": "/b/c", "value": 2}])
    with pytest.raises(Invalid, match="does not exist"):
        apply_json_patch(doc, [{"op": "replace", "path": "/x/y", "value": 1}])
    assert doc == {"a": [1, 2], "b": {"c": 1}}, "the original is untouched"
    before, after = {"a": 1, "b": {"c": 1}, "d/e": 1}, {"a": 2, "b": {"c": 1, "n": 1}}
    ops = diff(before, after)
    assert apply_json_patch(before, ops) == after
    assert {"op": "remove", "path": "/d~1e"} in ops


# The WIT the SDK ships.


def test_the_shipped_wit_should_be_the_repository_s():
    shipped = Path(__file__).resolve().parent.parent / "krec_guest" / "wit"
    repo = Path(__file__).resolve().parents[2] / "wit"
    names = sorted(p.name for p in repo.glob("*.wit"))
    assert sorted(p.name for p in shipped.glob("*.wit")) == names
    _, mismatch, errors = filecmp.cmpfiles(repo, shipped, names, shallow=False)
    assert not mismatch and not errors, f"krec_guest/wit differs from wit/ in {mismatch + errors}: copy wit/*.wit there"


def test_a_map_that_takes_a_context_should_read_and_not_write():
    class ByNamespace(Reconciler):
        def reconcile(self, req, ctx):
            return None

        def map(self, kind, obj, ctx):
            name = obj["metadata"]["name"]
            return [Request.of(cm) for cm in ctx.list(kinds.ConfigMap, namespace=name)]

    class Writer(Reconciler):
        def reconcile(self, req, ctx):
            return None

        def map(self, kind, obj, ctx):
            ctx.create(cm("new"))
            return []

    cluster = FakeCluster([cm("a", namespace="team-a"), cm("b", namespace="team-a"), cm("c")])
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    assert cluster.map(ByNamespace(), namespace) == [Request("team-a", "a"), Request("team-a", "b")]
    with pytest.raises(Forbidden, match="may not write while mapping an event"):
        cluster.map(Writer(), namespace)

// The TypeScript SDK natively: the context over the fake cluster, the glue's configuration and
// error handling, selectors, patches, and the WIT and its types shipped with the SDK.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  Action,
  AdmissionRequest,
  AlreadyExists,
  ConfigError,
  Conflict,
  Context,
  type Converter,
  Guest,
  Forbidden,
  Invalid,
  Kind,
  kinds,
  type KObject,
  type Mutator,
  NotFound,
  Other,
  type Reconciler,
  Request,
  selectorString,
  type Validator,
  Verdict,
} from "../src/index.js";
import { applyJsonPatch, diff, mergePatch } from "../src/patches.js";
import { matchesSelector } from "../src/selectors.js";
import { FakeCluster, resource } from "../src/testing.js";

const cm = (name: string, data: Record<string, string> = {}, namespace = "default", labels: Record<string, string> = {}): KObject => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name, namespace, labels },
  data,
});

test("get and getOpt should find stored objects and throw NotFound otherwise", () => {
  const ctx = new Context(new FakeCluster([cm("a", { k: "v" })]));
  assert.deepEqual(ctx.get(kinds.ConfigMap, "a", "default").data, { k: "v" });
  assert.equal(ctx.getOpt(kinds.ConfigMap, "b", "default"), undefined);
  assert.throws(() => ctx.get(kinds.ConfigMap, "b", "default"), (e: unknown) => e instanceof NotFound && /configmaps "b" not found/.test(e.message));
});

test("create should stamp, honour generateName and refuse a taken name", () => {
  const ctx = new Context(new FakeCluster());
  const created = ctx.create(cm("a"));
  assert.ok(created.metadata.resourceVersion && created.metadata.uid);
  const generated = ctx.create<KObject>({ apiVersion: "v1", kind: "ConfigMap", metadata: { generateName: "x-", namespace: "default" } });
  assert.match(generated.metadata.name ?? "", /^x-.{5}$/);
  assert.throws(() => ctx.create(cm("a")), AlreadyExists);
  assert.throws(() => ctx.create({ apiVersion: "v1", kind: "ConfigMap", metadata: {} }), Invalid);
});

test("an update from a stale read should conflict", () => {
  const ctx = new Context(new FakeCluster([cm("a")]));
  const first = ctx.get(kinds.ConfigMap, "a", "default");
  first.data = { k: "1" };
  const updated = ctx.update(first);
  assert.notEqual(updated.metadata.resourceVersion, first.metadata.resourceVersion);
  first.data = { k: "2" };
  assert.throws(() => ctx.update(first), (e: unknown) => e instanceof Conflict && /has been modified/.test(e.message));
});

test("update should keep the status of kinds with a status subresource", () => {
  const rs: KObject = {
    apiVersion: "apps/v1", kind: "ReplicaSet", metadata: { name: "web", namespace: "default" },
    spec: { replicas: 1, selector: { matchLabels: { app: "web" } }, template: { metadata: { labels: { app: "web" } }, spec: { containers: [{ name: "web", image: "nginx" }] } } },
    status: { replicas: 1 },
  };
  const ctx = new Context(new FakeCluster([rs]));
  const got = ctx.get(kinds.ReplicaSet, "web", "default");
  got.status = { replicas: 9 };
  got.spec.replicas = 2;
  const stored = ctx.update(got);
  assert.deepEqual(stored.status, { replicas: 1 });
  assert.equal(stored.metadata.generation, 2);
  stored.status = { replicas: 2 };
  assert.deepEqual(ctx.updateStatus(stored).status, { replicas: 2 });
});

test("list should filter by namespace, labels and fields", () => {
  const ctx = new Context(
    new FakeCluster([
      cm("a", {}, "default", { app: "web", tier: "fe" }),
      cm("b", {}, "default", { app: "web", tier: "be" }),
      cm("c", {}, "default", { app: "db" }),
      cm("d", {}, "other", { app: "web" }),
    ]),
  );
  const names = (objs: KObject[]) => objs.map((o) => o.metadata.name).sort();
  assert.deepEqual(names(ctx.list(kinds.ConfigMap)), ["a", "b", "c", "d"]);
  assert.deepEqual(names(ctx.list(kinds.ConfigMap, { namespace: "default", labels: { app: "web" } })), ["a", "b"]);
  assert.deepEqual(names(ctx.list(kinds.ConfigMap, { labels: "app=web,tier in (fe)" })), ["a"]);
  assert.deepEqual(names(ctx.list(kinds.ConfigMap, { labels: "tier notin (fe),app!=db" })), ["b", "d"]);
  assert.deepEqual(names(ctx.list(kinds.ConfigMap, { labels: "!tier" })), ["c", "d"]);
  assert.deepEqual(names(ctx.list(kinds.ConfigMap, { fields: "metadata.name=c" })), ["c"]);
  assert.deepEqual(names(ctx.list(kinds.ConfigMap, { fields: "metadata.namespace!=default" })), ["d"]);
  assert.throws(() => ctx.list(kinds.ConfigMap, { fields: "spec.x=1" }), Invalid);
  assert.throws(() => ctx.list(kinds.ConfigMap, { labels: "a in (" }), Invalid);
});

test("patches should merge, apply JSON operations and create on apply", () => {
  const ctx = new Context(new FakeCluster([cm("a", { k: "v", gone: "x" })]));
  assert.deepEqual(ctx.patch(kinds.ConfigMap, "a", { data: { gone: null, new: "1" } }, "default").data, { k: "v", new: "1" });
  const patched = ctx.patch(kinds.ConfigMap, "a", [{ op: "replace", path: "/data/k", value: "w" }], "default", { type: "json" });
  assert.equal(patched.data.k, "w");
  assert.deepEqual(ctx.apply(cm("b", { x: "y" })).data, { x: "y" });
  assert.throws(() => ctx.patch(kinds.ConfigMap, "missing", { data: {} }, "default"), NotFound);
});

test("delete should check preconditions and only mark objects with finalizers", () => {
  const held = cm("held");
  held.metadata.finalizers = ["example.com/keep"];
  const cluster = new FakeCluster([cm("a"), held]);
  const ctx = new Context(cluster);
  assert.throws(() => ctx.delete(kinds.ConfigMap, "a", "default", { uid: "not-its-uid" }), Conflict);
  ctx.delete(kinds.ConfigMap, "a", "default");
  assert.equal(cluster.object(kinds.ConfigMap, "a", "default"), undefined);
  assert.throws(() => ctx.delete(kinds.ConfigMap, "a", "default"), NotFound);
  ctx.delete(kinds.ConfigMap, "held", "default");
  const marked = cluster.object(kinds.ConfigMap, "held", "default") as KObject;
  assert.ok(marked.metadata.deletionTimestamp);
  marked.metadata.finalizers = [];
  ctx.update(marked);
  assert.equal(cluster.object(kinds.ConfigMap, "held", "default"), undefined);
});

test("finalizer should add itself, apply, then clean up and let the object go", () => {
  const cluster = new FakeCluster([cm("a")]);
  const ctx = new Context(cluster);
  const done: string[] = [];
  const step = () =>
    ctx.finalizer(cluster.object(kinds.ConfigMap, "a", "default") as KObject, "example.com/cleanup", {
      apply: (o) => {
        done.push(`apply ${o.metadata.name}`);
      },
      cleanup: (o) => {
        done.push(`cleanup ${o.metadata.name}`);
        return Action.requeueAfter(5000);
      },
    });
  // First the finalizer goes on, and nothing else happens in that reconcile.
  assert.equal(step(), undefined);
  assert.deepEqual(cluster.object(kinds.ConfigMap, "a", "default")?.metadata.finalizers, [
    "example.com/cleanup",
  ]);
  assert.deepEqual(done, []);
  assert.equal(step(), undefined);
  assert.deepEqual(done, ["apply a"]);
  // Deleted: only marked while the finalizer is on; cleanup runs, the finalizer goes, and with
  // it the object.
  ctx.delete(kinds.ConfigMap, "a", "default");
  assert.deepEqual(step(), Action.requeueAfter(5000));
  assert.deepEqual(done, ["apply a", "cleanup a"]);
  assert.equal(cluster.object(kinds.ConfigMap, "a", "default"), undefined);
});

test("a failing cleanup should keep the finalizer", () => {
  const held = cm("a");
  held.metadata.finalizers = ["example.com/cleanup"];
  const cluster = new FakeCluster([held]);
  const ctx = new Context(cluster);
  ctx.delete(kinds.ConfigMap, "a", "default");
  assert.throws(
    () =>
      ctx.finalizer(cluster.object(kinds.ConfigMap, "a", "default") as KObject, "example.com/cleanup", {
        apply: () => undefined,
        cleanup: () => {
          throw new Other("the bucket is away");
        },
      }),
    Other,
  );
  assert.deepEqual(cluster.object(kinds.ConfigMap, "a", "default")?.metadata.finalizers, [
    "example.com/cleanup",
  ]);
});

test("a map should read through its context and not write", () => {
  class ByNamespace implements Reconciler {
    reconcile(): void {}
    map(_kind: Kind, obj: KObject, ctx: Context): Request[] {
      return ctx.list(kinds.ConfigMap, { namespace: obj.metadata.name }).map((c) => Request.of(c));
    }
  }
  class Writer implements Reconciler {
    reconcile(): void {}
    map(_kind: Kind, _obj: KObject, ctx: Context): Request[] {
      ctx.create(cm("new"));
      return [];
    }
  }
  const cluster = new FakeCluster([cm("a", {}, "team-a"), cm("b", {}, "team-a"), cm("c")]);
  const namespace = { apiVersion: "v1", kind: "Namespace", metadata: { name: "team-a" } };
  assert.deepEqual(
    cluster.map(new ByNamespace(), namespace).map((r) => `${r}`),
    ["team-a/a", "team-a/b"],
  );
  assert.throws(() => cluster.map(new Writer(), namespace), Forbidden);
});

test("events and logs should be recorded, failures injected once", () => {
  class Noisy implements Reconciler {
    reconcile(req: Request, ctx: Context): Action {
      const obj = ctx.get(kinds.ConfigMap, req.name, req.namespace);
      ctx.recordEvent(obj, "Seen", "seen it", "Warning");
      ctx.log("info", "hello");
      return Action.requeueAfter(1500);
    }
  }
  const cluster = new FakeCluster([cm("a")]);
  assert.deepEqual(cluster.reconcile(new Noisy(), new Request("default", "a")), Action.requeueAfter(1500));
  assert.deepEqual(cluster.events.map((e) => [e.type, e.reason, e.regarding.name]), [["Warning", "Seen", "a"]]);
  assert.deepEqual(cluster.logs, [["info", "hello"]]);
  cluster.failNext("get", new Other("the API server is away"), kinds.ConfigMap);
  const ctx = new Context(cluster);
  assert.throws(() => ctx.get(kinds.ConfigMap, "a", "default"), Other);
  assert.ok(ctx.get(kinds.ConfigMap, "a", "default"));
});

test("kinds, requests and actions", () => {
  assert.deepEqual([kinds.ReplicaSet.group, kinds.ReplicaSet.version], ["apps", "v1"]);
  assert.deepEqual([kinds.Pod.group, kinds.Pod.version], ["", "v1"]);
  assert.ok(Kind.fromGvk("", "v1", "Pod").equals(kinds.Pod));
  assert.equal(resource(kinds.ReplicaSet), "replicasets.apps");
  assert.equal(resource(new Kind("networking.k8s.io/v1", "NetworkPolicy")), "networkpolicies.networking.k8s.io");
  assert.equal(String(new Request("default", "web")), "default/web");
  assert.equal(String(Request.cluster("node-1")), "node-1");
  assert.throws(() => Action.requeueAfter(-1), RangeError);
});

class Plain implements Reconciler {
  reconcile(): void {}
}

class Configured implements Reconciler {
  readonly label: string;
  constructor(config: { label?: string } | null) {
    if (!config?.label) throw new Error("label: required");
    this.label = config.label;
  }
  reconcile(): Action {
    throw new TypeError(`no ${this.label}`);
  }
}

test("a guest without configuration should refuse one", () => {
  assert.throws(() => new Guest({ reconciler: Plain }).init('{"label": "x"}'), (e: unknown) => e instanceof ConfigError && /takes no configuration/.test(e.message));
  new Guest({ reconciler: Plain }).init("null");
  new Guest({ reconciler: Plain }).init("{}");
});

test("configuration should reach the constructor and its refusal say why", () => {
  assert.throws(() => new Guest({ reconciler: Configured }).init("{}"), /spec\.config: Error: label: required/);
  const guest = new Guest({ reconciler: Configured });
  guest.init('{"label": "team"}');
  assert.equal((guest.part("reconciler") as Configured).label, "team");
  guest.init('{"label": "other"}');
  assert.equal((guest.part("reconciler") as Configured).label, "team", "a second init keeps the first's parts");
});

test("exceptions should become Other errors, and wrong answers be refused", () => {
  const guest = new Guest({ reconciler: Configured });
  guest.init('{"label": "team"}');
  assert.throws(() => guest.reconcile(new FakeCluster(), new Request("default", "a")), (e: unknown) => e instanceof Other && /^TypeError: no team/.test(e.message));
  class Wrong implements Reconciler {
    reconcile(): Action {
      return "done" as unknown as Action;
    }
  }
  assert.throws(() => new Guest({ reconciler: Wrong }).reconcile(new FakeCluster(), new Request("default", "a")), /return an Action/);
  assert.equal(new Guest({ reconciler: Plain }).reconcile(new FakeCluster(), new Request("d", "a")).kind, "done");
});

class Check implements Validator {
  validate(): Verdict {
    return Verdict.allow();
  }
}

test("missing parts should say so", () => {
  const guest = new Guest({ validator: Check });
  assert.throws(() => guest.reconcile(new FakeCluster(), new Request("default", "a")), /exports no reconciler/);
  assert.throws(() => guest.mutate(new FakeCluster(), AdmissionRequest.create(cm("a"))), /exports no mutator/);
  assert.throws(() => guest.convert(new FakeCluster(), ["{}"], "v2"), /exports no converter/);
  assert.throws(() => new Guest({}), /needs a reconciler/);
});

class Defaults implements Mutator {
  mutate(_req: AdmissionRequest, obj: KObject): Verdict {
    (obj.metadata.labels ??= {}).defaulted = "yes";
    return Verdict.allow().withWarning("labelled");
  }
}

class Upgrade implements Converter {
  convert(obj: KObject, desired: string): KObject {
    if (desired !== "v2") throw new Error(`cannot convert to ${desired}`);
    return { ...obj, apiVersion: "example.com/v2" };
  }
}

test("a mutator should answer its object and patch", () => {
  const mutated = new FakeCluster().mutate(new Defaults(), AdmissionRequest.create(cm("a")));
  assert.deepEqual(mutated.verdict.warnings, ["labelled"]);
  assert.equal(mutated.object?.metadata.labels?.defaulted, "yes");
  assert.deepEqual(mutated.patch, [{ op: "add", path: "/metadata/labels/defaulted", value: "yes" }]);
  assert.deepEqual(new FakeCluster().mutate(new Defaults(), AdmissionRequest.delete(cm("a"))).patch, []);
  const [, unchanged] = new Guest({ mutator: class implements Mutator { mutate() { return Verdict.allow(); } } }).mutate(new FakeCluster(), AdmissionRequest.create(cm("a")));
  assert.equal(unchanged, undefined);
});

test("reviews should parse their objects only when read", () => {
  const req = AdmissionRequest.update(cm("a", { v: "1" }), cm("a", { v: "2" }));
  assert.equal(req.operation, "UPDATE");
  assert.equal(req.resource, "configmaps");
  assert.equal(req.isParsed("object"), false);
  assert.deepEqual(req.object?.data, { v: "2" });
  assert.equal(req.isParsed("oldObject"), false);
  assert.deepEqual(req.oldObject?.data, { v: "1" });
  assert.deepEqual(Verdict.invalid("bad"), new Verdict(false, 422, "bad", "Invalid"));
});

test("a converter should convert each object or fail the whole conversion", () => {
  const guest = new Guest({ converter: Upgrade });
  const out = guest.convert(new FakeCluster(), [JSON.stringify({ apiVersion: "example.com/v1", kind: "W" })], "v2");
  assert.equal(JSON.parse(out[0]).apiVersion, "example.com/v2");
  assert.throws(() => guest.convert(new FakeCluster(), ["{}"], "v3"), /cannot convert to v3/);
});

test("selectors should render and match as kube-apiserver does", () => {
  assert.equal(
    selectorString({
      matchLabels: { app: "web" },
      matchExpressions: [
        { key: "tier", operator: "In", values: ["fe", "be"] },
        { key: "x", operator: "NotIn", values: ["1"] },
        { key: "y", operator: "Exists" },
        { key: "z", operator: "DoesNotExist" },
      ],
    }),
    "app=web,tier in (be,fe),x notin (1),y,!z",
  );
  assert.equal(selectorString({}), undefined);
  assert.throws(() => selectorString({ matchExpressions: [{ key: "a", operator: "Near" }] }), Invalid);
  assert.ok(matchesSelector("a=1", { a: "1" }) && !matchesSelector("a=1", {}));
  assert.ok(matchesSelector("a!=1", {}) && !matchesSelector("a!=1", { a: "1" }));
  assert.ok(matchesSelector(" a in (1, 2) , b ", { a: "2", b: "" }));
  assert.ok(matchesSelector("", { x: "y" }));
});

test("patches should follow their RFCs", () => {
  assert.deepEqual(mergePatch({ a: { b: 1, c: 2 }, l: [1] }, { a: { b: null }, l: [2] }), { a: { c: 2 }, l: [2] });
  const doc = { a: [1, 2], b: { c: 1 } };
  assert.deepEqual(applyJsonPatch(doc, [{ op: "add", path: "/a/-", value: 3 }]).a, [1, 2, 3]);
  assert.deepEqual(applyJsonPatch(doc, [{ op: "move", from: "/b/c", path: "/d" }]), { a: [1, 2], b: {}, d: 1 });
  assert.deepEqual(applyJsonPatch(doc, [{ op: "remove", path: "/a/0" }]).a, [2]);
  assert.throws(() => applyJsonPatch(doc, [{ op: "test", path: "/b/c", value: 2 }]), /test failed/);
  assert.throws(() => applyJsonPatch(doc, [{ op: "replace", path: "/x/y", value: 1 }]), /does not exist/);
  assert.deepEqual(doc, { a: [1, 2], b: { c: 1 } }, "the original is untouched");
  const before = { a: 1, b: { c: 1 }, "d/e": 1 };
  const after = { a: 2, b: { c: 1, n: 1 } };
  assert.deepEqual(applyJsonPatch(before, diff(before, after)), after);
});

// The SDK's folder (tests run from dist/test).
const SDK = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

test("the shipped WIT should be the repository's", () => {
  const repo = join(SDK, "..", "wit");
  const names = readdirSync(repo).filter((n) => n.endsWith(".wit")).sort();
  assert.deepEqual(readdirSync(join(SDK, "wit")).filter((n) => n.endsWith(".wit")).sort(), names);
  for (const name of names) {
    assert.equal(readFileSync(join(SDK, "wit", name), "utf8"), readFileSync(join(repo, name), "utf8"), `wit/${name} differs: copy ../wit/*.wit here`);
  }
  // The dev builds' import, as the host answers it.
  assert.equal(
    readFileSync(join(SDK, "wit-dev", "sources.wit"), "utf8"),
    readFileSync(join(repo, "dev", "sources.wit"), "utf8"),
    "wit-dev/sources.wit differs: copy ../wit/dev/sources.wit here",
  );
});

test("the WIT types should be what jco generates from the WIT", () => {
  const out = mkdtempSync(join(tmpdir(), "krec-wit-types-"));
  const jco = join(SDK, "node_modules", "@bytecodealliance", "jco", "src", "jco.js");
  const run = spawnSync(process.execPath, [jco, "guest-types", "wit", "-n", "controller", "-o", out], { cwd: SDK, encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  const files = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)).map((f) => `${e.name}/${f}`) : [e.name]));
  const generated = files(out).sort();
  assert.deepEqual(files(join(SDK, "types", "wit")).sort(), generated);
  for (const file of generated) {
    assert.equal(readFileSync(join(SDK, "types", "wit", file), "utf8"), readFileSync(join(out, file), "utf8"), `types/wit/${file} is stale: npm run types`);
  }
});

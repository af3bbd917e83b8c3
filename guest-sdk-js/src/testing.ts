/**
 * Unit tests for guests without WebAssembly: {@link FakeCluster}, an in-memory API server a
 * guest's `Context` calls, natively, under `node --test`.
 *
 * ```ts
 * const cluster = new FakeCluster([replicaSet("web"), pod("web-1")]);
 * cluster.reconcile(new PodCounter(), new Request("default", "web"));
 * assert.equal(cluster.object(ReplicaSet, "web", "default")?.metadata.labels?.["pod-count"], "1");
 * ```
 * As kube-apiserver: resourceVersions, `generateName`, conflicts on a stale resourceVersion,
 * `already exists`/`not found` errors, label and field selectors, the status subresource of the
 * built-in kinds that have one (and of kinds named in `statusSubresource`), finalizers, merge and
 * JSON patches. Simpler: no schema validation, defaulting, admission or garbage collection; a
 * strategic merge patch and a server-side apply are applied as merge patches; no permission
 * checks (krec checks the manifest's). Objects pass through JSON on every call, as they do
 * between a guest and krec.
 */

import { AdmissionRequest, mutated, type Converter, type Mutator, type Validator, type Verdict } from "./admission.js";
import { Context, type Host, type Level, type PatchType } from "./context.js";
import { AlreadyExists, Conflict, Forbidden, Invalid, KrecError, NotFound } from "./errors.js";
import { Kind, type KObject } from "./kinds.js";
import { withHost } from "./log.js";
import { applyJsonPatch, diff, mergePatch } from "./patches.js";
import { Action, Request, type Reconciler } from "./reconciler.js";
import { matchesSelector } from "./selectors.js";

export { AdmissionRequest };

/** Built-in kinds whose status is a subresource: `update` keeps their stored status. */
export const STATUS_SUBRESOURCE = new Set([
  "Pod", "ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Service",
  "Node", "Namespace", "PersistentVolume", "PersistentVolumeClaim", "ReplicationController",
  "HorizontalPodAutoscaler", "PodDisruptionBudget", "CustomResourceDefinition", "Ingress",
]);

/** The resource name kube-apiserver uses in messages: `replicasets.apps`, `pods`. */
export function resource(kind: Kind): string {
  const lower = kind.kind.toLowerCase();
  let plural: string;
  if (lower.endsWith("y") && !/[aeou]y$/.test(lower)) plural = `${lower.slice(0, -1)}ies`;
  else if (/(s|x|ch|sh)$/.test(lower)) plural = `${lower}es`;
  else plural = `${lower}s`;
  return kind.group ? `${plural}.${kind.group}` : plural;
}

/** What a mutator answered: its verdict, the object it left and the JSON patch to it. */
export interface Mutated {
  verdict: Verdict;
  object: KObject | undefined;
  patch: unknown[];
}

/** An Event a guest recorded. */
export interface RecordedEvent {
  regarding: { apiVersion: string; kind: string; namespace?: string; name: string; uid?: string };
  type: "Normal" | "Warning";
  reason: string;
  message: string;
}

/** A write a guest made. */
export interface Write {
  verb: "create" | "update" | "update-status" | "patch" | "delete";
  kind: Kind;
  namespace?: string;
  name: string;
}

const copy = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

/**
 * An in-memory cluster: seed it with objects, run a guest's parts against it, look at what they
 * wrote, the Events they recorded and the lines they logged.
 */
export class FakeCluster implements Host {
  private readonly store = new Map<string, KObject>();
  private version = 1000;
  private readonly statusKinds: Set<string>;
  private readonly failures: Array<{ verb: string; kind?: Kind; error: KrecError }> = [];
  private generated = 0;
  /** Events recorded, oldest first. */
  readonly events: RecordedEvent[] = [];
  /** Lines logged. */
  readonly logs: Array<[Level, string]> = [];
  /** Writes made. */
  readonly writes: Write[] = [];

  constructor(objects: KObject[] = [], options: { statusSubresource?: string[] } = {}) {
    this.statusKinds = new Set([...STATUS_SUBRESOURCE, ...(options.statusSubresource ?? [])]);
    this.add(...objects);
  }

  /** Store `objects` as they are (stamped when unstamped); replaces objects with the same key. */
  add(...objects: KObject[]): this {
    for (const obj of objects) {
      const stored = copy(obj);
      this.stamp(stored, true);
      this.store.set(this.keyOf(stored), stored);
    }
    return this;
  }

  /** The stored object (a copy), or `undefined`. */
  object<T extends KObject = KObject>(kind: Kind, name: string, namespace?: string): T | undefined {
    const found = this.store.get(FakeCluster.key(kind, namespace, name));
    return found === undefined ? undefined : (copy(found) as T);
  }

  /** The stored objects of `kind` (in `namespace` when given), by namespace and name. */
  objects<T extends KObject = KObject>(kind: Kind, namespace?: string): T[] {
    return [...this.store.entries()]
      .filter(([key]) => key.startsWith(`${kind.group}\0${kind.kind}\0${namespace === undefined ? "" : `${namespace}\0`}`))
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, obj]) => copy(obj) as T);
  }

  /** Make the next `verb` call (of `kind` when given) throw `error`. */
  failNext(verb: "get" | "list" | "create" | "update" | "patch" | "delete" | "recordEvent", error: KrecError, kind?: Kind): this {
    this.failures.push({ verb, kind, error });
    return this;
  }

  /** Run `reconciler` for `req`; what it throws propagates (in krec: logged and retried). */
  reconcile(reconciler: Reconciler, req: Request): Action {
    const action = withHost(this, () => reconciler.reconcile(req, new Context(this)));
    if (action === undefined) return Action.done();
    if (!(action instanceof Action)) throw new TypeError("reconcile returned something other than an Action");
    return action;
  }

  /** Run `reconciler.map` for an event on `obj`. */
  map(reconciler: Reconciler, obj: KObject): Request[] {
    if (!reconciler.map) throw new TypeError("the reconciler has no map");
    const map = reconciler.map.bind(reconciler);
    // Reads through this cluster, writes refused: as krec runs `map`.
    const refuse = (): never => {
      throw new Forbidden("the guest may not write while mapping an event (map reads only)");
    };
    const readOnly: Host = {
      get: this.get.bind(this),
      list: this.list.bind(this),
      log: this.log.bind(this),
      create: refuse,
      update: refuse,
      patch: refuse,
      delete: refuse,
      recordEvent: refuse,
    };
    return withHost(this, () => map(Kind.of(obj), copy(obj), new Context(readOnly)));
  }

  /** Run `validator` on the review `req`. */
  validate(validator: Validator, req: AdmissionRequest): Verdict {
    return withHost(this, () => validator.validate(req, new Context(this)));
  }

  /** Run `mutator` on the review `req`: its verdict, object and patch. */
  mutate(mutator: Mutator, req: AdmissionRequest): Mutated {
    const [verdict, obj] = withHost(this, () => mutated(mutator, req, new Context(this)));
    if (obj === undefined) return { verdict, object: req.object, patch: [] };
    return { verdict, object: obj, patch: diff(req.object, obj) };
  }

  /** Run `converter` on each object, as a conversion review does. */
  convert(converter: Converter, objects: KObject[], desiredApiVersion: string): KObject[] {
    return withHost(this, () => objects.map((o) => copy(converter.convert(copy(o), desiredApiVersion))));
  }

  // The host calls, on JSON text.

  get(kind: Kind, namespace: string | undefined, name: string): string {
    this.fail("get", kind);
    return JSON.stringify(this.stored(kind, namespace, name));
  }

  list(kind: Kind, namespace: string | undefined, labelSelector: string | undefined, fieldSelector: string | undefined): string[] {
    this.fail("list", kind);
    const fields = FakeCluster.fields(fieldSelector);
    return this.objects(kind, namespace)
      .filter((obj) => matchesSelector(labelSelector, obj.metadata?.labels))
      .filter((obj) => fields.every((check) => check(obj.metadata ?? {})))
      .map((obj) => JSON.stringify(obj));
  }

  create(text: string): string {
    const obj = FakeCluster.decode(text) as KObject;
    const kind = Kind.of(obj);
    this.fail("create", kind);
    const meta = (obj.metadata ??= {});
    if (!meta.name) {
      if (!meta.generateName) {
        throw new Invalid(`${resource(kind)}: metadata.name: Required value: name or generateName is required`);
      }
      this.generated += 1;
      meta.name = `${meta.generateName}${(this.generated * 7919).toString(36).padStart(5, "0").slice(-5)}`;
    }
    const key = this.keyOf(obj);
    if (this.store.has(key)) throw new AlreadyExists(`${resource(kind)} "${meta.name}" already exists`);
    for (const field of ["uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"]) delete meta[field];
    this.stamp(obj, true);
    this.store.set(key, obj);
    this.writes.push({ verb: "create", kind, namespace: meta.namespace, name: meta.name });
    return JSON.stringify(obj);
  }

  update(text: string, status: boolean): string {
    const obj = FakeCluster.decode(text) as KObject;
    const kind = Kind.of(obj);
    this.fail("update", kind);
    const meta = obj.metadata ?? {};
    const stored = this.stored(kind, meta.namespace, meta.name ?? "");
    this.checkVersion(kind, stored, meta.resourceVersion);
    let result: KObject;
    if (status) {
      result = copy(stored);
      if ("status" in obj) result.status = obj.status;
      else delete result.status;
    } else {
      result = obj;
      if (this.statusKinds.has(kind.kind)) {
        if ("status" in stored) result.status = copy(stored.status);
        else delete result.status;
      }
    }
    return this.replace(status ? "update-status" : "update", kind, stored, result);
  }

  patch(kind: Kind, namespace: string | undefined, name: string, how: PatchType, body: string, status: boolean): string {
    this.fail("patch", kind);
    const patch = FakeCluster.decode(body, how === "json");
    const stored = this.store.get(FakeCluster.key(kind, namespace, name));
    if (stored === undefined) {
      if (how !== "apply") throw new NotFound(`${resource(kind)} "${name}" not found`);
      return this.create(JSON.stringify(patch));
    }
    let result: KObject;
    if (how === "json") result = applyJsonPatch(stored, patch);
    else {
      this.checkVersion(kind, stored, patch?.metadata?.resourceVersion);
      result = mergePatch(stored, patch);
    }
    if (status) {
      const kept = copy(stored);
      kept.status = result.status;
      result = kept;
    } else if (this.statusKinds.has(kind.kind) && "status" in stored) {
      result.status = copy(stored.status);
    }
    return this.replace("patch", kind, stored, result);
  }

  delete(kind: Kind, namespace: string | undefined, name: string, uid: string | undefined, resourceVersion: string | undefined): void {
    this.fail("delete", kind);
    const stored = this.stored(kind, namespace, name);
    const meta = stored.metadata;
    if (uid !== undefined && meta.uid !== uid) {
      throw new Conflict(
        `Operation cannot be fulfilled on ${resource(kind)} "${name}": Precondition failed: UID in precondition: ${uid}, UID in object meta: ${meta.uid}`,
      );
    }
    if (resourceVersion !== undefined && meta.resourceVersion !== resourceVersion) {
      throw new Conflict(
        `Operation cannot be fulfilled on ${resource(kind)} "${name}": Precondition failed: ResourceVersion in precondition: ${resourceVersion}, ResourceVersion in object meta: ${meta.resourceVersion}`,
      );
    }
    this.writes.push({ verb: "delete", kind, namespace, name });
    if (meta.finalizers?.length) {
      if (!meta.deletionTimestamp) {
        meta.deletionTimestamp = "2026-01-01T00:00:00Z";
        this.stamp(stored, false);
      }
      return;
    }
    this.store.delete(FakeCluster.key(kind, namespace, name));
  }

  recordEvent(kind: Kind, namespace: string | undefined, name: string, uid: string | undefined, type: "Normal" | "Warning", reason: string, message: string): void {
    this.fail("recordEvent", kind);
    this.events.push({ regarding: { apiVersion: kind.apiVersion, kind: kind.kind, namespace, name, uid }, type, reason, message });
  }

  log(level: Level, message: string): void {
    this.logs.push([level, message]);
  }

  // Inside.

  private static key(kind: Kind, namespace: string | undefined, name: string): string {
    return `${kind.group}\0${kind.kind}\0${namespace ?? ""}\0${name}`;
  }

  private keyOf(obj: KObject): string {
    return FakeCluster.key(Kind.of(obj), obj.metadata?.namespace, obj.metadata?.name ?? "");
  }

  private stored(kind: Kind, namespace: string | undefined, name: string): KObject {
    const stored = this.store.get(FakeCluster.key(kind, namespace, name));
    if (stored === undefined) throw new NotFound(`${resource(kind)} "${name}" not found`);
    return stored;
  }

  private checkVersion(kind: Kind, stored: KObject, version: string | undefined): void {
    if (version && version !== stored.metadata.resourceVersion) {
      throw new Conflict(
        `Operation cannot be fulfilled on ${resource(kind)} "${stored.metadata.name}": the object has been modified; please apply your changes to the latest version and try again`,
      );
    }
  }

  private stamp(obj: KObject, fresh: boolean): void {
    const meta = (obj.metadata ??= {});
    this.version += 1;
    meta.resourceVersion = String(this.version);
    if (fresh) {
      meta.uid ??= `00000000-0000-4000-8000-${String(this.version).padStart(12, "0")}`;
      meta.creationTimestamp ??= "2026-01-01T00:00:00Z";
      if ("spec" in obj) meta.generation ??= 1;
    }
  }

  private replace(verb: Write["verb"], kind: Kind, stored: KObject, result: KObject): string {
    const meta = (result.metadata ??= {});
    const before = stored.metadata;
    for (const field of ["uid", "creationTimestamp", "deletionTimestamp", "generation"] as const) {
      if (before[field] !== undefined) (meta as Record<string, unknown>)[field] = before[field];
    }
    if (before.generation !== undefined && JSON.stringify(result.spec) !== JSON.stringify(stored.spec)) {
      meta.generation = before.generation + 1;
    }
    if (JSON.stringify(result) === JSON.stringify(stored)) return JSON.stringify(stored);
    this.stamp(result, false);
    this.store.set(this.keyOf(result), result);
    this.writes.push({ verb, kind, namespace: meta.namespace, name: meta.name ?? "" });
    if (meta.deletionTimestamp && !meta.finalizers?.length) this.store.delete(this.keyOf(result));
    return JSON.stringify(result);
  }

  private fail(verb: string, kind: Kind): void {
    const at = this.failures.findIndex((f) => f.verb === verb && (f.kind === undefined || f.kind.equals(kind)));
    if (at >= 0) {
      const [failure] = this.failures.splice(at, 1);
      throw failure.error;
    }
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  private static decode(text: string, listOk = false): any {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new Invalid(`the object is not JSON: ${String(err)}`);
    }
    const ok = (typeof value === "object" && value !== null && !Array.isArray(value)) || (listOk && Array.isArray(value));
    if (!ok) throw new Invalid("the object is not a JSON object");
    return value;
  }

  private static fields(selector: string | undefined): Array<(meta: Record<string, unknown>) => boolean> {
    const checks: Array<(meta: Record<string, unknown>) => boolean> = [];
    for (const raw of (selector ?? "").split(",")) {
      const term = raw.trim();
      if (!term) continue;
      const negate = term.includes("!=");
      const [field, value = ""] = term.replace("!=", "=").replace("==", "=").split("=", 2).map((s) => s.trim());
      if (field !== "metadata.name" && field !== "metadata.namespace") {
        throw new Invalid(`field label not supported: "${field}"`);
      }
      const attribute = field.split(".")[1];
      checks.push((meta) => ((meta[attribute] ?? "") === value) !== negate);
    }
    return checks;
  }
}

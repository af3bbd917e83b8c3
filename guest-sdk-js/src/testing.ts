/**
 * Unit tests for guests without WebAssembly: {@link FakeCluster}, the cluster a guest's
 * `Context` calls, natively, under `node --test`.
 *
 * ```ts
 * const cluster = new FakeCluster([replicaSet("web"), pod("web-1")]);
 * cluster.reconcile(new PodCounter(), new Request("default", "web"));
 * assert.equal(cluster.object(ReplicaSet, "web", "default")?.metadata.labels?.["pod-count"], "1");
 * ```
 * The objects live in krec's own API server store (`krec fake-cluster`, started for each
 * `FakeCluster` and found as `$KREC` or `krec` on `PATH`): every verdict and message is the
 * cluster's — names, labels and annotations, the built-in kinds' schemas and defaults, a
 * CustomResourceDefinition's schema (add the CRD first), resourceVersion conflicts,
 * `generateName`, the status subresource, finalizers and garbage collection, label and field
 * selectors, merge, JSON, strategic merge patches and server-side apply. Not here: admission
 * webhooks, built-in controllers (a Deployment makes no ReplicaSet) and permission checks (krec
 * checks the manifest's, and `krec dev` does). Objects pass through JSON on every call, as they
 * do between a guest and krec.
 */

import { readFileSync } from "node:fs";

import { AdmissionRequest, mutated, type Converter, type Mutator, type Validator, type Verdict } from "./admission.js";
import { Context, type Host, type Level, type PatchType } from "./context.js";
import { Forbidden, type KrecError, NotFound } from "./errors.js";
import { KrecProcess } from "./krec-process.js";
import { Kind, type KObject } from "./kinds.js";
import { withHost } from "./log.js";
import { diff } from "./patches.js";
import { Action, Request, type Reconciler } from "./reconciler.js";

export { AdmissionRequest };

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

/** The kind and namespace fields of a call. */
function kindFields(kind: Kind, namespace: string | undefined): Record<string, unknown> {
  return namespace ? { apiVersion: kind.apiVersion, kind: kind.kind, namespace } : { apiVersion: kind.apiVersion, kind: kind.kind };
}

/** The kind an object's JSON text names, or `undefined` (krec then says what is wrong). */
function kindOfText(text: string): Kind | undefined {
  try {
    return Kind.of(JSON.parse(text) as KObject);
  } catch {
    return undefined;
  }
}

/**
 * A cluster for one test: seed it with objects, run a guest's parts against it, look at what
 * they wrote, the Events they recorded and the lines they logged.
 */
export class FakeCluster implements Host {
  private readonly krec = new KrecProcess();
  private readonly failures: Array<{ verb: string; kind?: Kind; error: KrecError }> = [];
  /** Events recorded, oldest first. */
  readonly events: RecordedEvent[] = [];
  /** Lines logged. */
  readonly logs: Array<[Level, string]> = [];
  /** Writes made. */
  readonly writes: Write[] = [];

  constructor(objects: KObject[] = []) {
    this.add(...objects);
  }

  /**
   * Store `objects` as fixtures (not counted as writes), in order — a custom resource after its
   * CustomResourceDefinition: each namespace is created when missing and each `status` is
   * stored too. A fixture the cluster refuses throws its error, naming it.
   */
  add(...objects: KObject[]): this {
    for (const obj of objects) this.krec.call("add", { object: obj });
    return this;
  }

  /** Store the objects of YAML or JSON files (`---` between documents), as {@link add} does. */
  addFiles(...paths: string[]): this {
    for (const path of paths) this.krec.call("add", { text: readFileSync(path, "utf8") });
    return this;
  }

  /** The stored object, or `undefined`. */
  object<T extends KObject = KObject>(kind: Kind, name: string, namespace?: string): T | undefined {
    try {
      return this.krec.call("get", { name, ...kindFields(kind, namespace) }) as T;
    } catch (err) {
      if (err instanceof NotFound) return undefined;
      throw err;
    }
  }

  /** The stored objects of `kind` (in `namespace` when given), by namespace and name. */
  objects<T extends KObject = KObject>(kind: Kind, namespace?: string): T[] {
    return this.krec.call("list", kindFields(kind, namespace)) as T[];
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

  // The host calls, on JSON text, answered by krec's store.

  get(kind: Kind, namespace: string | undefined, name: string): string {
    this.fail("get", kind);
    return JSON.stringify(this.krec.call("get", { name, ...kindFields(kind, namespace) }));
  }

  list(kind: Kind, namespace: string | undefined, labelSelector: string | undefined, fieldSelector: string | undefined): string[] {
    this.fail("list", kind);
    const found = this.krec.call("list", { labelSelector, fieldSelector, ...kindFields(kind, namespace) }) as KObject[];
    return found.map((obj) => JSON.stringify(obj));
  }

  create(text: string): string {
    this.fail("create", kindOfText(text));
    const created = this.krec.call("create", { object: text }) as KObject;
    this.wrote("create", created);
    return JSON.stringify(created);
  }

  update(text: string, status: boolean): string {
    this.fail("update", kindOfText(text));
    const updated = this.krec.call("update", { object: text, status }) as KObject;
    this.wrote(status ? "update-status" : "update", updated);
    return JSON.stringify(updated);
  }

  patch(kind: Kind, namespace: string | undefined, name: string, how: PatchType, body: string, status: boolean): string {
    this.fail("patch", kind);
    const patched = this.krec.call("patch", { name, patchType: how, body, status, ...kindFields(kind, namespace) }) as KObject;
    this.wrote("patch", patched);
    return JSON.stringify(patched);
  }

  delete(kind: Kind, namespace: string | undefined, name: string, uid: string | undefined, resourceVersion: string | undefined): void {
    this.fail("delete", kind);
    this.krec.call("delete", { name, uid, resourceVersion, ...kindFields(kind, namespace) });
    this.writes.push({ verb: "delete", kind, namespace, name });
  }

  recordEvent(kind: Kind, namespace: string | undefined, name: string, uid: string | undefined, type: "Normal" | "Warning", reason: string, message: string): void {
    this.fail("recordEvent", kind);
    this.events.push({ regarding: { apiVersion: kind.apiVersion, kind: kind.kind, namespace, name, uid }, type, reason, message });
  }

  log(level: Level, message: string): void {
    this.logs.push([level, message]);
  }

  // Inside.

  private wrote(verb: Write["verb"], obj: KObject): void {
    this.writes.push({ verb, kind: Kind.of(obj), namespace: obj.metadata?.namespace, name: obj.metadata?.name ?? "" });
  }

  private fail(verb: string, kind: Kind | undefined): void {
    const at = this.failures.findIndex(
      (f) => f.verb === verb && (f.kind === undefined || kind === undefined || f.kind.equals(kind)),
    );
    if (at >= 0) {
      const [failure] = this.failures.splice(at, 1);
      throw failure.error;
    }
  }
}

/**
 * The guest's view of the cluster: {@link Context}, and the {@link Host} it calls. Inside
 * WebAssembly the host is krec (the WIT `client`, `events` and `log` imports, every call checked
 * against the guest's manifest); in unit tests it is `FakeCluster` from `@krec/guest/testing`.
 */

import { NotFound } from "./errors.js";
import { Kind, type KObject } from "./kinds.js";
import type { Action } from "./action.js";

/** Patch formats, as the WIT `patch-type` names them. */
export type PatchType = "merge" | "json" | "strategic" | "apply";

/** Log levels, as the WIT `log.level` names them. */
export type Level = "trace" | "debug" | "info" | "warn" | "error";

/** One method per WIT host call, on JSON text; errors are thrown as `KrecError`s. */
export interface Host {
  get(kind: Kind, namespace: string | undefined, name: string): string;
  list(
    kind: Kind,
    namespace: string | undefined,
    labelSelector: string | undefined,
    fieldSelector: string | undefined,
    uncached: boolean,
  ): string[];
  create(obj: string): string;
  update(obj: string, status: boolean): string;
  patch(
    kind: Kind,
    namespace: string | undefined,
    name: string,
    how: PatchType,
    body: string,
    status: boolean,
  ): string;
  delete(
    kind: Kind,
    namespace: string | undefined,
    name: string,
    uid: string | undefined,
    resourceVersion: string | undefined,
  ): void;
  recordEvent(
    kind: Kind,
    namespace: string | undefined,
    name: string,
    uid: string | undefined,
    type: "Normal" | "Warning",
    reason: string,
    message: string,
  ): void;
  log(level: Level, message: string): void;
}

/** How to select objects in {@link Context.list}. */
export interface ListOptions {
  /** Only objects in this namespace; all namespaces when absent. */
  namespace?: string;
  /** A label selector: `"app=web,tier in (fe,be)"` or `{app: "web"}` (its matchLabels). */
  labels?: string | Record<string, string>;
  /** A field selector on `metadata.name` and `metadata.namespace`. */
  fields?: string;
  /** Read from the API server instead of the host's cache. */
  uncached?: boolean;
}

/** Options of {@link Context.patch}. */
export interface PatchOptions {
  /** `merge` (RFC 7386, the default), `json` (RFC 6902), `strategic` or `apply`. */
  type?: PatchType;
  /** Patch the status subresource. */
  status?: boolean;
}

/** A label selector's text: a string as it is, an object as `k=v,…`. */
export function selectorText(labels: string | Record<string, string> | undefined): string | undefined {
  if (labels === undefined || typeof labels === "string") return labels || undefined;
  const text = Object.entries(labels)
    .map(([key, value]) => `${key}=${value}`)
    .join(",");
  return text || undefined;
}

/**
 * Read and write cluster state, record Events and log: what `reconcile`, `validate` and
 * `mutate` are given. Reads come from the host's shared cache (`uncached` asks the API server);
 * writes go to the API server and return the object as stored. Errors are thrown as
 * `KrecError`s (`NotFound`, `Conflict`, …).
 */
export class Context {
  constructor(private readonly host: Host) {}

  /** The object `namespace/name` of `kind`; throws `NotFound` when absent. */
  get<T extends KObject = KObject>(kind: Kind, name: string, namespace?: string): T {
    return JSON.parse(this.host.get(kind, namespace, name)) as T;
  }

  /** The object `namespace/name` of `kind`, or `undefined` when it does not exist. */
  getOpt<T extends KObject = KObject>(kind: Kind, name: string, namespace?: string): T | undefined {
    try {
      return this.get<T>(kind, name, namespace);
    } catch (err) {
      if (err instanceof NotFound) return undefined;
      throw err;
    }
  }

  /** Objects of `kind` matching `options`. */
  list<T extends KObject = KObject>(kind: Kind, options: ListOptions = {}): T[] {
    const texts = this.host.list(
      kind,
      options.namespace,
      selectorText(options.labels),
      options.fields || undefined,
      options.uncached ?? false,
    );
    return texts.map((text) => JSON.parse(text) as T);
  }

  /** Create `obj` (`metadata.generateName` is honoured); returns it as stored. */
  create<T extends KObject>(obj: T): T {
    return JSON.parse(this.host.create(JSON.stringify(obj))) as T;
  }

  /** Replace `obj`; its resourceVersion must match the stored one (`Conflict` otherwise). */
  update<T extends KObject>(obj: T): T {
    return JSON.parse(this.host.update(JSON.stringify(obj), false)) as T;
  }

  /** Replace `obj`'s status through the status subresource. */
  updateStatus<T extends KObject>(obj: T): T {
    return JSON.parse(this.host.update(JSON.stringify(obj), true)) as T;
  }

  /** Patch `namespace/name` with `body` (an object, or a list of operations for `json`). */
  patch<T extends KObject = KObject>(
    kind: Kind,
    name: string,
    body: unknown,
    namespace?: string,
    options: PatchOptions = {},
  ): T {
    const how = options.type ?? "merge";
    if (!["merge", "json", "strategic", "apply"].includes(how)) {
      throw new TypeError(`patch type ${JSON.stringify(how)}: expected merge, json, strategic or apply`);
    }
    const text = this.host.patch(kind, namespace, name, how, JSON.stringify(body), options.status ?? false);
    return JSON.parse(text) as T;
  }

  /** Server-side apply `obj` (its intended state, owned by the guest's field manager). */
  apply<T extends KObject>(obj: T, status = false): T {
    const meta = obj.metadata ?? {};
    return this.patch<T>(Kind.of(obj), meta.name ?? "", obj, meta.namespace, { type: "apply", status });
  }

  /**
   * Delete `namespace/name`, only if it still has `uid`/`resourceVersion` when given. Objects
   * with finalizers are only marked for deletion; an absent one throws `NotFound`.
   */
  delete(
    kind: Kind,
    name: string,
    namespace?: string,
    preconditions: { uid?: string; resourceVersion?: string } = {},
  ): void {
    this.host.delete(kind, namespace, name, preconditions.uid, preconditions.resourceVersion);
  }

  /**
   * Reconcile `obj` behind `finalizer` (e.g. `example.com/cleanup`), as kube-runtime's
   * `finalizer` and controller-runtime's finalizer helpers do. While the object lives it carries
   * `finalizer` (added first, by an update whose own event brings the object back) and
   * `apply(obj)` brings the world in line with it. Once it is being deleted, `cleanup(obj)`
   * undoes what it made outside its owner references; when that returns, the finalizer is
   * removed and the object goes. A throw from either leaves the finalizer on and the key is
   * retried with backoff. An object being deleted without the finalizer is done. Returns what
   * `apply` or `cleanup` returned (`undefined`: done).
   */
  finalizer<T extends KObject>(
    obj: T,
    finalizer: string,
    handlers: { apply: (obj: T) => Action | void; cleanup: (obj: T) => Action | void },
  ): Action | void {
    const finalizers = obj.metadata.finalizers ?? [];
    const deleting = Boolean(obj.metadata.deletionTimestamp);
    const has = finalizers.includes(finalizer);
    if (!deleting && !has) {
      this.update({ ...obj, metadata: { ...obj.metadata, finalizers: [...finalizers, finalizer] } });
      return undefined;
    }
    if (!deleting) return handlers.apply(obj);
    if (!has) return undefined;
    const action = handlers.cleanup(obj);
    const kept = finalizers.filter((f) => f !== finalizer);
    try {
      this.update({ ...obj, metadata: { ...obj.metadata, finalizers: kept } });
    } catch (err) {
      // Gone already: nothing left to remove the finalizer from.
      if (!(err instanceof NotFound)) throw err;
    }
    return action;
  }

  /**
   * Record an Event about `regarding`. Best effort for the caller: catch `KrecError` when a
   * lost Event does not matter.
   */
  recordEvent(
    regarding: KObject,
    reason: string,
    message: string,
    type: "Normal" | "Warning" = "Normal",
  ): void {
    if (type !== "Normal" && type !== "Warning") {
      throw new TypeError(`event type ${JSON.stringify(type)}: expected Normal or Warning`);
    }
    const meta = regarding.metadata ?? {};
    this.host.recordEvent(Kind.of(regarding), meta.namespace, meta.name ?? "", meta.uid, type, reason, message);
  }

  /** Write a line to the host's log, tagged with the guest and the request. */
  log(level: Level, message: string): void {
    this.host.log(level, message);
  }
}

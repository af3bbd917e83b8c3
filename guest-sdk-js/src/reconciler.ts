/** Reconcilers: the {@link Request} they are given and the {@link Action} they return. */

import type { Context } from "./context.js";
import type { Kind, KObject } from "./kinds.js";

/** The key of the object to reconcile. The object may be gone already. */
export class Request {
  constructor(
    readonly namespace: string | undefined,
    readonly name: string,
  ) {}

  /** A request for a cluster-scoped object. */
  static cluster(name: string): Request {
    return new Request(undefined, name);
  }

  /** The request for `obj`. */
  static of(obj: KObject): Request {
    return new Request(obj.metadata?.namespace, obj.metadata?.name ?? "");
  }

  toString(): string {
    return this.namespace ? `${this.namespace}/${this.name}` : this.name;
  }
}

/** What the host does with the request after a successful reconcile. */
export class Action {
  private constructor(
    /** `done`, `requeue` or `requeue-after`. */
    readonly kind: "done" | "requeue" | "requeue-after",
    /** For `requeue-after`: after how many milliseconds. */
    readonly afterMs = 0,
  ) {}

  /** The object is in its desired state: forget the key's backoff. */
  static done(): Action {
    return new Action("done");
  }

  /** Reconcile the key again soon, through the rate limiter. */
  static requeue(): Action {
    return new Action("requeue");
  }

  /** Reconcile the key again after `ms` milliseconds. */
  static requeueAfter(ms: number): Action {
    if (!(ms >= 0)) throw new RangeError("requeueAfter: ms must not be negative");
    return new Action("requeue-after", Math.round(ms));
  }
}

/**
 * A reconciler: implement `reconcile`. The host builds one instance per worker; a constructor
 * that declares a parameter is given the manifest's `spec.config` (parsed JSON, `null` when
 * absent); throwing there rejects the configuration (the version running before keeps running).
 */
export interface Reconciler {
  /**
   * Bring the cluster state for `req` towards its desired state. Return an {@link Action}
   * (`undefined` is done); throw to fail the reconcile (logged, retried with backoff).
   */
  reconcile(req: Request, ctx: Context): Action | void;
  /** For watches with `mapByGuest: true`: the requests an event on `obj` causes. */
  map?(kind: Kind, obj: KObject): Request[];
}

/** Reconcilers: the {@link Request} they are given and the {@link Action} they return. */

import type { Context } from "./context.js";
import type { Kind, KObject } from "./kinds.js";
import { Action } from "./action.js";

export { Action };

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
  /**
   * For watches with `mapByGuest: true`: the requests an event on `obj` causes. `ctx` reads the
   * cluster (from the host's cache; writes throw `Forbidden`): a Namespace appearing, mapped to
   * the objects that name it.
   */
  map?(kind: Kind, obj: KObject, ctx: Context): Request[];
}

/** What a reconcile returns: `Action` (controller-runtime's `reconcile.Result`). */

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

/**
 * pod-counter, in TypeScript: labels every ReplicaSet with the number of its pods
 * (`pod-count`), as the Rust `pod-counter` and the Python `pod-counter-py` do — the benchmarks
 * run the three side by side.
 */

import { Action, Context, guest, Invalid, kinds, log, Reconciler, Request, selectorString } from "@krec/guest";

/** The label this reconciler maintains. */
export const POD_COUNT_LABEL = "pod-count";

export class PodCounter implements Reconciler {
  reconcile(req: Request, ctx: Context): Action {
    const rs = ctx.getOpt(kinds.ReplicaSet, req.name, req.namespace);
    if (!rs) return Action.done();
    let selector: string | undefined;
    try {
      selector = selectorString(rs.spec?.selector);
    } catch (err) {
      if (!(err instanceof Invalid)) throw err;
      log.warn(`ReplicaSet ${req}: ${err.message}; not counting`);
      return Action.done();
    }
    if (!selector) {
      log.warn(`ReplicaSet ${req} has an empty spec.selector; not counting`);
      return Action.done();
    }
    const count = String(ctx.list(kinds.Pod, { namespace: req.namespace, labels: selector }).length);
    const labels = (rs.metadata.labels ??= {});
    if (labels[POD_COUNT_LABEL] === count) return Action.done();
    log.info(`ReplicaSet ${req}: ${POD_COUNT_LABEL}=${count}`);
    labels[POD_COUNT_LABEL] = count;
    ctx.update(rs);
    return Action.done();
  }
}

export default guest({ reconciler: PodCounter });

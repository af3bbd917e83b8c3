/**
 * krec guests in TypeScript: reconcilers and admission webhooks compiled to WebAssembly
 * components (with componentize-js) that krec runs beside Rust and Python guests.
 *
 * ```ts
 * import { Action, Context, guest, Reconciler, Request } from "@krec/guest";
 * import { ReplicaSet } from "@krec/guest/kinds";
 *
 * class Labeller implements Reconciler {
 *   reconcile(req: Request, ctx: Context): Action {
 *     const rs = ctx.getOpt(ReplicaSet, req.name, req.namespace);
 *     if (!rs) return Action.done();
 *     const labels = (rs.metadata.labels ??= {});
 *     if (labels.seen !== "yes") { labels.seen = "yes"; ctx.update(rs); }
 *     return Action.done();
 *   }
 * }
 *
 * export default guest({ reconciler: Labeller });
 * ```
 * Build it with `krec-guest-build src/app.ts -o app.wasm`; unit-test its classes with
 * `FakeCluster` from `@krec/guest/testing`.
 */

import { Guest, type Parts } from "./glue.js";

export * from "./admission.js";
export { Context, type Host, type Level, type ListOptions, type PatchOptions, type PatchType } from "./context.js";
export * from "./errors.js";
export { Kind, type KObject, type ObjectMeta } from "./kinds.js";
export * as kinds from "./kinds.js";
export * as log from "./log.js";
export { Action, Request, type Reconciler } from "./reconciler.js";
export { selectorString } from "./selectors.js";
export { ConfigError, Guest, type PartClass, type Parts } from "./glue.js";

/**
 * The guest: its main module's default export (`export default guest({reconciler: …})`).
 * Each part is a class; the host builds one instance of each per worker, from the manifest's
 * `spec.config` when its constructor declares a parameter.
 */
export function guest(parts: Parts): Guest {
  return new Guest(parts);
}

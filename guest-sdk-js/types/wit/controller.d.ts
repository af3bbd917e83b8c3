/// <reference path="./interfaces/krec-reconciler-admission-types.d.ts" />
/// <reference path="./interfaces/krec-reconciler-client.d.ts" />
/// <reference path="./interfaces/krec-reconciler-events.d.ts" />
/// <reference path="./interfaces/krec-reconciler-log.d.ts" />
/// <reference path="./interfaces/krec-reconciler-reader.d.ts" />
/// <reference path="./interfaces/krec-reconciler-types.d.ts" />
declare module 'krec:reconciler/controller@0.1.2' {
  export type Request = import('krec:reconciler/types@0.1.2').Request;
  export type Action = import('krec:reconciler/types@0.1.2').Action;
  export type Error = import('krec:reconciler/types@0.1.2').Error;
  export type AdmissionRequest = import('krec:reconciler/admission-types@0.1.2').AdmissionRequest;
  export type Verdict = import('krec:reconciler/admission-types@0.1.2').Verdict;
  export type Gvk = import('krec:reconciler/types@0.1.2').Gvk;
  export type MappedRequest = import('krec:reconciler/types@0.1.2').Request;
  export type MapError = import('krec:reconciler/types@0.1.2').Error;
  export type * as KrecReconcilerAdmissionTypes012 from 'krec:reconciler/admission-types@0.1.2'; // import krec:reconciler/admission-types@0.1.2
  export type * as KrecReconcilerClient012 from 'krec:reconciler/client@0.1.2'; // import krec:reconciler/client@0.1.2
  export type * as KrecReconcilerEvents012 from 'krec:reconciler/events@0.1.2'; // import krec:reconciler/events@0.1.2
  export type * as KrecReconcilerLog012 from 'krec:reconciler/log@0.1.2'; // import krec:reconciler/log@0.1.2
  export type * as KrecReconcilerReader012 from 'krec:reconciler/reader@0.1.2'; // import krec:reconciler/reader@0.1.2
  export type * as KrecReconcilerTypes012 from 'krec:reconciler/types@0.1.2'; // import krec:reconciler/types@0.1.2
  /**
  * Bring the cluster state for `req` towards its desired state.
  * 
  * The host never runs two reconciles of the same request at once, but may run the same
  * request again at any time, so a reconcile must be idempotent. An `error` result is logged
  * and the request is retried with backoff.
  */
  export function reconcile(req: Request): Action;
  /**
  * Judge a request: allow it or deny it with a message.
  */
  export function validate(request: AdmissionRequest): Verdict;
  /**
  * Judge a request and say how its object should change (`verdict.patched`).
  */
  export function mutate(request: AdmissionRequest): Verdict;
  /**
  * Convert objects of a custom resource to `desired-api-version` (a CRD conversion webhook):
  * one JSON object in, one out, in order; an error fails the whole conversion.
  */
  export function convert(objects: Array<string>, desiredApiVersion: string): Array<string>;
  /**
  * Configure a new instance: called once, before any other export, with the manifest's
  * `spec.config` as JSON text (`null` when the manifest has none). An error rejects the
  * configuration: the host does not run this version of the guest and says why.
  */
  export function init(config: string): void;
  /**
  * Map an object of a watched kind to the requests it should cause, for the manifest's
  * watches with `mapByGuest: true` (controller-runtime's `EnqueueRequestsFromMapFunc`).
  * `object` is the object's JSON as the host's cache holds it (for a deletion: its last
  * state). Called once per event, with the guest's limits; an error or a trap drops that
  * event's requests and is logged and counted.
  */
  export function map(kind: Gvk, object: string): Array<MappedRequest>;
}

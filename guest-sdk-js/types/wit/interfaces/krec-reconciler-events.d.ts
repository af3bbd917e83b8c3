/// <reference path="./krec-reconciler-types.d.ts" />
declare module 'krec:reconciler/events@0.1.2' {
  /**
   * Record an Event. `reason` is a short CamelCase word, `message` a human-readable sentence.
   * Recording is best effort for the caller: an error is returned but need not fail the reconcile.
   */
  export function record(regarding: ObjectReference, type: EventType, reason: string, message: string): void;
  export type Gvk = import('krec:reconciler/types@0.1.2').Gvk;
  export type Error = import('krec:reconciler/types@0.1.2').Error;
  /**
   * Whether an Event reports normal progress or something a person should look at.
   * # Variants
   * 
   * ## `"normal"`
   * 
   * Normal progress, e.g. `Synced`.
   * ## `"warning"`
   * 
   * Something unexpected, e.g. `ErrResourceExists`.
   */
  export type EventType = 'normal' | 'warning';
  /**
   * The object an Event is about.
   */
  export interface ObjectReference {
    /**
     * Kind of the object.
     */
    kind: Gvk,
    /**
     * Namespace of the object; none for cluster-scoped objects.
     */
    namespace?: string,
    /**
     * Name of the object.
     */
    name: string,
    /**
     * UID of the object, if known.
     */
    uid?: string,
  }
}

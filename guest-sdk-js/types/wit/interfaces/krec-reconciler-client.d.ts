/// <reference path="./krec-reconciler-types.d.ts" />
declare module 'krec:reconciler/client@0.1.2' {
  /**
   * Get one object. Returns `not-found` if it does not exist.
   */
  export function get(kind: Gvk, namespace: string | undefined, name: string): string;
  /**
   * List objects of a kind, one JSON object per element.
   */
  export function list(kind: Gvk, options: ListOptions): Array<string>;
  /**
   * Create an object; `metadata.generateName` is honoured. Returns the created object.
   */
  export function create(object: string): string;
  /**
   * Replace an object. `metadata.resourceVersion` must match the stored object or the call
   * fails with `conflict`; changes to `status` are ignored for kinds with a status subresource.
   */
  export function update(object: string): string;
  /**
   * Replace an object's status through the status subresource; other changes are ignored.
   */
  export function updateStatus(object: string): string;
  /**
   * Patch an object (or its status subresource when `status` is true). Returns the result.
   */
  export function patch(kind: Gvk, namespace: string | undefined, name: string, how: PatchType, body: string, status: boolean): string;
  /**
   * Delete an object. Objects with finalizers are only marked for deletion. Deleting an object
   * that is already gone returns `not-found`.
   */
  export { _delete as delete };
  function _delete(kind: Gvk, namespace: string | undefined, name: string, preconditions: Preconditions | undefined): void;
  export type Gvk = import('krec:reconciler/types@0.1.2').Gvk;
  export type ListOptions = import('krec:reconciler/types@0.1.2').ListOptions;
  export type PatchType = import('krec:reconciler/types@0.1.2').PatchType;
  export type Preconditions = import('krec:reconciler/types@0.1.2').Preconditions;
  export type Error = import('krec:reconciler/types@0.1.2').Error;
}

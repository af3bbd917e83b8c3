/// <reference path="./krec-reconciler-types.d.ts" />
declare module 'krec:reconciler/reader@0.1.2' {
  /**
   * Get one object. Returns `not-found` if it does not exist.
   */
  export function get(kind: Gvk, namespace: string | undefined, name: string): string;
  /**
   * List objects of a kind, one JSON object per element.
   */
  export function list(kind: Gvk, options: ListOptions): Array<string>;
  export type Gvk = import('krec:reconciler/types@0.1.2').Gvk;
  export type ListOptions = import('krec:reconciler/types@0.1.2').ListOptions;
  export type Error = import('krec:reconciler/types@0.1.2').Error;
}

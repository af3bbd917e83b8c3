/// <reference path="./krec-reconciler-types.d.ts" />
declare module 'krec:reconciler/admission-types@0.1.2' {
  export type Gvk = import('krec:reconciler/types@0.1.2').Gvk;
  /**
   * What the request does.
   * # Variants
   * 
   * ## `"create"`
   * 
   * A create (also a server-side apply of an object that does not exist yet).
   * ## `"update"`
   * 
   * An update, a patch or an apply of an existing object.
   * ## `"delete"`
   * 
   * A delete.
   * ## `"connect"`
   * 
   * A connect (exec, port-forward, proxy).
   */
  export type Operation = 'create' | 'update' | 'delete' | 'connect';
  /**
   * Who makes the request.
   */
  export interface UserInfo {
    /**
     * The user's name, e.g. `system:serviceaccount:kube-system:replicaset-controller`.
     */
    username: string,
    /**
     * The user's groups.
     */
    groups: Array<string>,
  }
  /**
   * One admission request (`AdmissionReview.request`).
   */
  export interface AdmissionRequest {
    /**
     * Identifies this request; the host copies it into the answer.
     */
    uid: string,
    /**
     * The kind of the object.
     */
    kind: Gvk,
    /**
     * The resource's plural, e.g. `pods`.
     */
    resource: string,
    /**
     * The subresource, e.g. `status`; none for the main resource.
     */
    subResource?: string,
    /**
     * The object's name; none when a create has only `generateName`.
     */
    name?: string,
    /**
     * The object's namespace; none for cluster-scoped kinds.
     */
    namespace?: string,
    /**
     * What the request does.
     */
    operation: Operation,
    /**
     * Who makes it.
     */
    userInfo: UserInfo,
    /**
     * The new object (none for a delete), JSON.
     */
    object?: string,
    /**
     * The stored object (none for a create), JSON.
     */
    oldObject?: string,
    /**
     * The request will not be persisted: a webhook with side effects must not cause them.
     */
    dryRun: boolean,
  }
  /**
   * A webhook's answer.
   */
  export interface Verdict {
    /**
     * Whether the request may go on.
     */
    allowed: boolean,
    /**
     * The HTTP code of a denial (400 when none or less than 400).
     */
    code?: number,
    /**
     * Why, for people: shown by kubectl as `admission webhook "…" denied the request: MESSAGE`.
     */
    message?: string,
    /**
     * Why, for machines: a Kubernetes `StatusReason` such as `Invalid` or `Forbidden`.
     */
    reason?: string,
    /**
     * Warnings returned to the client (kubectl prints them).
     */
    warnings: Array<string>,
    /**
     * Annotations for the audit log, `key=value`.
     */
    auditAnnotations: Array<[string, string]>,
    /**
     * From `mutate`: the object as it should be admitted, JSON; the host answers the JSON
     * patch from the request's object to it. None: unchanged.
     */
    patched?: string,
  }
}

declare module 'krec:reconciler/types@0.1.2' {
  /**
   * A Kubernetes group/version/kind. The core group is the empty string (`v1 Pod` is
   * `{group: "", version: "v1", kind: "Pod"}`).
   */
  export interface Gvk {
    /**
     * API group, empty for the core group.
     */
    group: string,
    /**
     * API version within the group, e.g. `v1`.
     */
    version: string,
    /**
     * Kind in CamelCase, e.g. `ReplicaSet`.
     */
    kind: string,
  }
  /**
   * What a guest is asked to reconcile: the object key, as controller-runtime's `reconcile.Request`.
   * The object may no longer exist; reconcilers read the current state instead of trusting events.
   */
  export interface Request {
    /**
     * Namespace of the object; none for cluster-scoped objects.
     */
    namespace?: string,
    /**
     * Name of the object.
     */
    name: string,
  }
  /**
   * What the host should do with the request after a successful reconcile.
   */
  export type Action = ActionDone | ActionRequeue | ActionRequeueAfter;
  /**
   * The object is in its desired state: forget the key's backoff.
   */
  export interface ActionDone {
    tag: 'done',
  }
  /**
   * Reconcile the key again soon, through the rate limiter.
   */
  export interface ActionRequeue {
    tag: 'requeue',
  }
  /**
   * Reconcile the key again after this many milliseconds.
   */
  export interface ActionRequeueAfter {
    tag: 'requeue-after',
    val: bigint,
  }
  /**
   * How to select objects in a `list` call.
   */
  export interface ListOptions {
    /**
     * Only objects in this namespace; none lists across all namespaces (or a cluster-scoped kind).
     */
    namespace?: string,
    /**
     * A Kubernetes label selector, e.g. `app=web,tier in (fe,be),!legacy`.
     */
    labelSelector?: string,
    /**
     * A field selector on `metadata.name` and `metadata.namespace`, e.g. `metadata.name=x`.
     */
    fieldSelector?: string,
    /**
     * Read from the API server instead of the host's cache (slower; for strongly consistent reads).
     */
    uncached: boolean,
  }
  /**
   * Body format of a `patch` call.
   * # Variants
   * 
   * ## `"merge"`
   * 
   * JSON merge patch (RFC 7386).
   * ## `"json"`
   * 
   * JSON patch (RFC 6902): a list of operations.
   * ## `"strategic"`
   * 
   * Strategic merge patch (built-in kinds only).
   * ## `"apply"`
   * 
   * Server-side apply: the body is the object's intended state, owned by the guest's field manager.
   */
  export type PatchType = 'merge' | 'json' | 'strategic' | 'apply';
  /**
   * Conditions a `delete` checks before deleting, as Kubernetes' `Preconditions`.
   */
  export interface Preconditions {
    /**
     * Delete only if the object still has this UID.
     */
    uid?: string,
    /**
     * Delete only if the object still has this resourceVersion (nothing changed since it was read).
     */
    resourceVersion?: string,
  }
  /**
   * Why a host call or a reconcile failed. Each case carries a human-readable message.
   */
  export type Error = ErrorNotFound | ErrorAlreadyExists | ErrorConflict | ErrorForbidden | ErrorInvalid | ErrorTimeout | ErrorUnavailable | ErrorOther;
  /**
   * The object does not exist.
   */
  export interface ErrorNotFound {
    tag: 'not-found',
    val: string,
  }
  /**
   * `create` of an object whose name is taken.
   */
  export interface ErrorAlreadyExists {
    tag: 'already-exists',
    val: string,
  }
  /**
   * The object changed since it was read (stale resourceVersion) or a precondition failed;
   * read it again and retry.
   */
  export interface ErrorConflict {
    tag: 'conflict',
    val: string,
  }
  /**
   * The guest's manifest does not permit this call, or the API server refused it.
   */
  export interface ErrorForbidden {
    tag: 'forbidden',
    val: string,
  }
  /**
   * The object or arguments are malformed (bad JSON, failed validation, bad selector).
   */
  export interface ErrorInvalid {
    tag: 'invalid',
    val: string,
  }
  /**
   * The call or the reconcile took too long.
   */
  export interface ErrorTimeout {
    tag: 'timeout',
    val: string,
  }
  /**
   * The API server could not be reached or is not ready; retry later.
   */
  export interface ErrorUnavailable {
    tag: 'unavailable',
    val: string,
  }
  /**
   * Anything else.
   */
  export interface ErrorOther {
    tag: 'other',
    val: string,
  }
}

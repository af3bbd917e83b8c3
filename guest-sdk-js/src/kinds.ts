/**
 * Kinds name an object's type in host calls (the WIT `gvk`). Objects themselves are plain
 * objects, as `JSON.parse` makes them.
 */

/** An object's metadata: the fields reconcilers use most, typed; the rest kept. */
export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: Array<{
    apiVersion: string;
    kind: string;
    name: string;
    uid: string;
    controller?: boolean;
    blockOwnerDeletion?: boolean;
  }>;
  [field: string]: unknown;
}

/** A Kubernetes object: `apiVersion`, `kind`, `metadata` and whatever else it holds. */
export interface KObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  [field: string]: any;
}

/** A Kubernetes kind: `new Kind("apps/v1", "ReplicaSet")`; the core group is `"v1"`. */
export class Kind {
  constructor(
    readonly apiVersion: string,
    readonly kind: string,
  ) {}

  /** The API group, `""` for the core group. */
  get group(): string {
    const at = this.apiVersion.lastIndexOf("/");
    return at < 0 ? "" : this.apiVersion.slice(0, at);
  }

  /** The version within the group. */
  get version(): string {
    return this.apiVersion.slice(this.apiVersion.lastIndexOf("/") + 1);
  }

  /** The kind of `obj`, from its `apiVersion` and `kind`. */
  static of(obj: { apiVersion?: unknown; kind?: unknown }): Kind {
    if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string" || !obj.kind) {
      throw new TypeError("the object has no apiVersion and kind");
    }
    return new Kind(obj.apiVersion, obj.kind);
  }

  /** The kind of a group, version and kind. */
  static fromGvk(group: string, version: string, kind: string): Kind {
    return new Kind(group ? `${group}/${version}` : version, kind);
  }

  /** Whether `other` is the same kind. */
  equals(other: Kind): boolean {
    return this.apiVersion === other.apiVersion && this.kind === other.kind;
  }

  toString(): string {
    return `${this.apiVersion} ${this.kind}`;
  }
}

export const Pod = new Kind("v1", "Pod");
export const ConfigMap = new Kind("v1", "ConfigMap");
export const Secret = new Kind("v1", "Secret");
export const Service = new Kind("v1", "Service");
export const ServiceAccount = new Kind("v1", "ServiceAccount");
export const Namespace = new Kind("v1", "Namespace");
export const Node = new Kind("v1", "Node");
export const Event = new Kind("v1", "Event");
export const PersistentVolumeClaim = new Kind("v1", "PersistentVolumeClaim");
export const Deployment = new Kind("apps/v1", "Deployment");
export const ReplicaSet = new Kind("apps/v1", "ReplicaSet");
export const StatefulSet = new Kind("apps/v1", "StatefulSet");
export const DaemonSet = new Kind("apps/v1", "DaemonSet");
export const Job = new Kind("batch/v1", "Job");
export const CronJob = new Kind("batch/v1", "CronJob");
export const Lease = new Kind("coordination.k8s.io/v1", "Lease");

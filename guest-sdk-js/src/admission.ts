/** Admission webhooks: validators, mutators and converters, the requests they judge and the verdicts they answer. */

import type { Context } from "./context.js";
import { Kind, type KObject } from "./kinds.js";

/** What the request does. */
export type Operation = "CREATE" | "UPDATE" | "DELETE" | "CONNECT";

/** Who makes the request. */
export interface UserInfo {
  username: string;
  groups: string[];
}

/** The fields of an {@link AdmissionRequest}, objects as JSON text. */
export interface AdmissionRequestInit {
  uid?: string;
  kind: Kind;
  resource: string;
  subResource?: string;
  name?: string;
  namespace?: string;
  operation: Operation;
  user?: UserInfo;
  objectJson?: string;
  oldObjectJson?: string;
  dryRun?: boolean;
}

/** Options of the test constructors {@link AdmissionRequest.create} and friends. */
export interface ReviewOptions {
  user?: UserInfo;
  dryRun?: boolean;
  resource?: string;
  uid?: string;
}

/**
 * One admission request (`AdmissionReview.request`). Its objects are parsed on first use: a
 * validator that reads only `object` never pays for `oldObject`.
 */
export class AdmissionRequest {
  readonly uid: string;
  readonly kind: Kind;
  /** The resource's plural, e.g. `pods`. */
  readonly resource: string;
  readonly subResource?: string;
  /** The object's name (absent for a create with only `generateName`). */
  readonly name?: string;
  readonly namespace?: string;
  readonly operation: Operation;
  readonly user: UserInfo;
  /** The request will not be persisted: no side effects. */
  readonly dryRun: boolean;
  private readonly texts: { object?: string; oldObject?: string };
  private readonly parsed: { object?: KObject | null; oldObject?: KObject | null } = {};

  constructor(init: AdmissionRequestInit) {
    this.uid = init.uid ?? "";
    this.kind = init.kind;
    this.resource = init.resource;
    this.subResource = init.subResource;
    this.name = init.name;
    this.namespace = init.namespace;
    this.operation = init.operation;
    this.user = init.user ?? { username: "krec-test", groups: [] };
    this.dryRun = init.dryRun ?? false;
    this.texts = { object: init.objectJson, oldObject: init.oldObjectJson };
  }

  private parse(which: "object" | "oldObject"): KObject | undefined {
    if (!(which in this.parsed)) {
      const text = this.texts[which];
      this.parsed[which] = text === undefined ? null : (JSON.parse(text) as KObject);
    }
    return this.parsed[which] ?? undefined;
  }

  /** The new object (absent for a delete). */
  get object(): KObject | undefined {
    return this.parse("object");
  }

  /** The stored object (absent for a create). */
  get oldObject(): KObject | undefined {
    return this.parse("oldObject");
  }

  /** Whether `which` was parsed yet (for tests of laziness). */
  isParsed(which: "object" | "oldObject"): boolean {
    return which in this.parsed;
  }

  /** A review of creating `obj`, for tests. */
  static create(obj: KObject, options: ReviewOptions = {}): AdmissionRequest {
    return AdmissionRequest.for("CREATE", obj, undefined, options);
  }

  /** A review of replacing `old` with `obj`, for tests. */
  static update(old: KObject, obj: KObject, options: ReviewOptions = {}): AdmissionRequest {
    return AdmissionRequest.for("UPDATE", obj, old, options);
  }

  /** A review of deleting `obj`, for tests. */
  static delete(obj: KObject, options: ReviewOptions = {}): AdmissionRequest {
    return AdmissionRequest.for("DELETE", undefined, obj, options);
  }

  private static for(
    operation: Operation,
    obj: KObject | undefined,
    old: KObject | undefined,
    options: ReviewOptions,
  ): AdmissionRequest {
    const subject = (obj ?? old) as KObject;
    const kind = Kind.of(subject);
    return new AdmissionRequest({
      kind,
      resource: options.resource ?? `${kind.kind.toLowerCase()}s`,
      operation,
      name: subject.metadata?.name,
      namespace: subject.metadata?.namespace,
      objectJson: obj === undefined ? undefined : JSON.stringify(obj),
      oldObjectJson: old === undefined ? undefined : JSON.stringify(old),
      user: options.user,
      dryRun: options.dryRun,
      uid: options.uid,
    });
  }
}

/** A webhook's answer: allowed, or denied with a message, and warnings either way. */
export class Verdict {
  /** Warnings for the client (kubectl prints them). */
  readonly warnings: string[] = [];
  /** Annotations for the audit log. */
  readonly auditAnnotations: Array<[string, string]> = [];

  constructor(
    /** Whether the request may go on. */
    readonly allowed: boolean,
    /** The HTTP code of a denial (400 when absent, as kube-apiserver answers). */
    readonly code?: number,
    /** Why, for people: `admission webhook "NAME" denied the request: MESSAGE`. */
    readonly message?: string,
    /** Why, for machines: a Kubernetes `StatusReason`. */
    readonly reason?: string,
  ) {}

  /** Allow the request. */
  static allow(): Verdict {
    return new Verdict(true);
  }

  /** Deny the request with `message` (HTTP 400 unless `code`). */
  static deny(message: string, code?: number, reason?: string): Verdict {
    return new Verdict(false, code, message, reason);
  }

  /** Deny as invalid: 422 `Invalid`, what kube-apiserver answers for a bad field. */
  static invalid(message: string): Verdict {
    return new Verdict(false, 422, message, "Invalid");
  }

  /** This verdict with a warning for the client. */
  withWarning(warning: string): Verdict {
    this.warnings.push(warning);
    return this;
  }

  /** This verdict with an audit annotation. */
  withAuditAnnotation(key: string, value: string): Verdict {
    this.auditAnnotations.push([key, value]);
    return this;
  }
}

/**
 * A validating webhook. To let the webhook's `failurePolicy` decide instead (the check itself
 * failed), throw: the review traps and the API server is answered HTTP 500.
 */
export interface Validator {
  validate(req: AdmissionRequest, ctx: Context): Verdict;
}

/** A mutating webhook: change `obj` (a copy of the request's object) in place and judge. */
export interface Mutator {
  mutate(req: AdmissionRequest, obj: KObject, ctx: Context): Verdict;
}

/** A CRD conversion webhook: `obj` in `desiredApiVersion`; throw to fail the whole conversion. */
export interface Converter {
  convert(obj: KObject, desiredApiVersion: string): KObject;
}

/** Whether two JSON values are equal. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && jsonEqual((a as never)[k], (b as never)[k]));
}

/**
 * Run `mutator` on a copy of `req`'s object: its verdict, and the object it left when that
 * differs from the request's (`undefined`: unchanged, or a delete).
 */
export function mutated(
  mutator: Mutator,
  req: AdmissionRequest,
  ctx: Context,
): [Verdict, KObject | undefined] {
  const original = req.object;
  if (original === undefined) return [Verdict.allow(), undefined];
  const obj = JSON.parse(JSON.stringify(original)) as KObject;
  const verdict = mutator.mutate(req, obj, ctx);
  return [verdict, jsonEqual(obj, original) ? undefined : obj];
}

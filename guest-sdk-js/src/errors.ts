/**
 * Why a host call or a reconcile failed: one error class per case of the WIT `error` variant.
 *
 * ```ts
 * try { ctx.create(deployment); } catch (e) { if (!(e instanceof AlreadyExists)) throw e; }
 * ```
 * A reconciler may throw them too (or anything else): the reconcile fails, is logged and
 * counted, and the request is retried with backoff.
 */

/** The WIT `error` cases. */
export type ErrorCase =
  | "not-found"
  | "already-exists"
  | "conflict"
  | "forbidden"
  | "invalid"
  | "timeout"
  | "unavailable"
  | "other";

/** A failed host call or reconcile; `message` says why, for people. */
export class KrecError extends Error {
  /** The WIT `error` case this class stands for. */
  readonly case: ErrorCase = "other";
}

/** The object does not exist. */
export class NotFound extends KrecError {
  override readonly case = "not-found";
}
/** `create` of an object whose name is taken. */
export class AlreadyExists extends KrecError {
  override readonly case = "already-exists";
}
/** The object changed since it was read (stale resourceVersion) or a precondition failed. */
export class Conflict extends KrecError {
  override readonly case = "conflict";
}
/** The guest's manifest does not permit the call, or the API server refused it. */
export class Forbidden extends KrecError {
  override readonly case = "forbidden";
}
/** The object or arguments are malformed (bad JSON, failed validation, bad selector). */
export class Invalid extends KrecError {
  override readonly case = "invalid";
}
/** The call or the reconcile took too long. */
export class Timeout extends KrecError {
  override readonly case = "timeout";
}
/** The API server could not be reached or is not ready: retry later. */
export class Unavailable extends KrecError {
  override readonly case = "unavailable";
}
/** Anything else. */
export class Other extends KrecError {
  override readonly case = "other";
}

/** The error class of each WIT case. */
export const BY_CASE: Record<ErrorCase, new (message: string) => KrecError> = {
  "not-found": NotFound,
  "already-exists": AlreadyExists,
  conflict: Conflict,
  forbidden: Forbidden,
  invalid: Invalid,
  timeout: Timeout,
  unavailable: Unavailable,
  other: Other,
};

/** `err` for a log line or an error message: its type (unless a krec error) and text. */
export function describe(err: unknown): string {
  if (err instanceof KrecError) return err.message;
  if (err instanceof Error) {
    // The first stack frame in the guest's own code says where (bundled: the bundle's line).
    const at = (err.stack ?? "")
      .split("\n")
      .slice(1)
      .map((line) => line.trim())
      .find((line) => line && !line.includes("@krec/guest") && !line.includes("guest-sdk-js"));
    return `${err.name}: ${err.message}${at ? ` (${at.replace(/^at /, "at ")})` : ""}`;
  }
  return String(err);
}

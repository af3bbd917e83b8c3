/**
 * The WebAssembly side: the host's WIT imports as a {@link Host}, and the component's exports
 * for a guest. Only bundled into a component (`krec:reconciler/*` are its imports, resolved by
 * componentize-js); the types of those modules are generated from the WIT by `jco guest-types`.
 */

/// <reference path="../types/wit/controller.d.ts" />

import * as client from "krec:reconciler/client@0.1.2";
import * as events from "krec:reconciler/events@0.1.2";
import * as witLog from "krec:reconciler/log@0.1.2";
import type * as review from "krec:reconciler/admission-types@0.1.2";
import type * as types from "krec:reconciler/types@0.1.2";

import { AdmissionRequest, type Operation, type Verdict } from "./admission.js";
import type { Host, Level, PatchType } from "./context.js";
import { BY_CASE, type ErrorCase, KrecError } from "./errors.js";
import { ConfigError, type Guest } from "./glue.js";
import { Kind, type KObject } from "./kinds.js";
import { Request } from "./reconciler.js";

const gvk = (kind: Kind): types.Gvk => ({ group: kind.group, version: kind.version, kind: kind.kind });

/** Call a host import, throwing its WIT error as the SDK's error class. */
function call<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    const payload = (err as { payload?: types.Error }).payload;
    if (payload && typeof payload === "object" && "tag" in payload) {
      const cls = BY_CASE[payload.tag as ErrorCase] ?? BY_CASE.other;
      throw new cls(payload.val);
    }
    throw err;
  }
}

/** krec, through the component's imports. */
export const wasmHost: Host = {
  get: (kind, namespace, name) => call(() => client.get(gvk(kind), namespace, name)),
  list: (kind, namespace, labelSelector, fieldSelector, uncached) =>
    call(() => client.list(gvk(kind), { namespace, labelSelector, fieldSelector, uncached })),
  create: (obj) => call(() => client.create(obj)),
  update: (obj, status) => call(() => (status ? client.updateStatus(obj) : client.update(obj))),
  patch: (kind, namespace, name, how: PatchType, body, status) =>
    call(() => client.patch(gvk(kind), namespace, name, how, body, status)),
  delete: (kind, namespace, name, uid, resourceVersion) =>
    call(() =>
      client.delete(
        gvk(kind),
        namespace,
        name,
        uid === undefined && resourceVersion === undefined ? undefined : { uid, resourceVersion },
      ),
    ),
  recordEvent: (kind, namespace, name, uid, type, reason, message) =>
    call(() =>
      events.record(
        { kind: gvk(kind), namespace, name, uid },
        type === "Warning" ? "warning" : "normal",
        reason,
        message,
      ),
    ),
  log: (level: Level, message) => witLog.log(level, message),
};

type Result<T, E> = { tag: "ok"; val: T } | { tag: "err"; val: E };

const witError = (err: KrecError): types.Error => ({ tag: err.case, val: err.message }) as types.Error;

function request(req: review.AdmissionRequest): AdmissionRequest {
  return new AdmissionRequest({
    uid: req.uid,
    kind: Kind.fromGvk(req.kind.group, req.kind.version, req.kind.kind),
    resource: req.resource,
    subResource: req.subResource,
    name: req.name,
    namespace: req.namespace,
    operation: req.operation.toUpperCase() as Operation,
    user: { username: req.userInfo.username, groups: req.userInfo.groups },
    objectJson: req.object,
    oldObjectJson: req.oldObject,
    dryRun: req.dryRun,
  });
}

function verdict(v: Verdict, patched: KObject | undefined): review.Verdict {
  return {
    allowed: v.allowed,
    code: v.code,
    message: v.message,
    reason: v.reason,
    warnings: [...v.warnings],
    auditAnnotations: v.auditAnnotations.map(([k, val]) => [String(k), String(val)]),
    patched: patched === undefined ? undefined : JSON.stringify(patched),
  };
}

/** The component's exports for `guest` (what the build's entry module re-exports). */
export function exportsOf(guest: Guest) {
  return {
    init(config: string): Result<void, string> {
      try {
        guest.init(config);
        return { tag: "ok", val: undefined };
      } catch (err) {
        if (err instanceof ConfigError) return { tag: "err", val: err.message };
        throw err;
      }
    },
    reconcile(req: types.Request): Result<types.Action, types.Error> {
      try {
        const action = guest.reconcile(wasmHost, new Request(req.namespace, req.name));
        const val: types.Action =
          action.kind === "requeue-after"
            ? { tag: "requeue-after", val: BigInt(action.afterMs) }
            : { tag: action.kind };
        return { tag: "ok", val };
      } catch (err) {
        if (err instanceof KrecError) return { tag: "err", val: witError(err) };
        throw err;
      }
    },
    map(kind: types.Gvk, object: string): Result<types.Request[], types.Error> {
      let obj: KObject;
      try {
        obj = JSON.parse(object) as KObject;
      } catch (err) {
        return { tag: "err", val: { tag: "invalid", val: `the ${kind.kind} to map does not decode: ${String(err)}` } };
      }
      try {
        const mapped = guest.map(wasmHost, Kind.fromGvk(kind.group, kind.version, kind.kind), obj);
        return { tag: "ok", val: mapped.map((r) => ({ namespace: r.namespace, name: r.name })) };
      } catch (err) {
        if (err instanceof KrecError) return { tag: "err", val: witError(err) };
        throw err;
      }
    },
    validate(req: review.AdmissionRequest): review.Verdict {
      return verdict(guest.validate(wasmHost, request(req)), undefined);
    },
    mutate(req: review.AdmissionRequest): review.Verdict {
      const [v, patched] = guest.mutate(wasmHost, request(req));
      return verdict(v, patched);
    },
    convert(objects: string[], desiredApiVersion: string): Result<string[], string> {
      try {
        return { tag: "ok", val: guest.convert(wasmHost, objects, desiredApiVersion) };
      } catch (err) {
        return { tag: "err", val: typeof err === "string" ? err : String(err) };
      }
    },
  };
}

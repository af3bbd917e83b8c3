/**
 * Logging into the host's log, tagged with the guest's name and the current request:
 * `log.info("…")`. Lines written outside a call from the host are dropped.
 */

import type { Host, Level } from "./context.js";

let current: Host | undefined;

/** Run `call` with log lines going to `host`. */
export function withHost<T>(host: Host, call: () => T): T {
  const before = current;
  current = host;
  try {
    return call();
  } finally {
    current = before;
  }
}

/** Write `message` at `level`. */
export function log(level: Level, message: string): void {
  current?.log(level, message);
}

/** Very detailed tracing. */
export const trace = (message: string): void => log("trace", message);
/** Detail useful when debugging. */
export const debug = (message: string): void => log("debug", message);
/** Normal progress. */
export const info = (message: string): void => log("info", message);
/** Something unexpected that was handled. */
export const warn = (message: string): void => log("warn", message);
/** A failure. */
export const error = (message: string): void => log("error", message);

/**
 * A `krec fake-cluster` process — krec's own API server store, one call per line of JSON — called
 * synchronously, as a guest's host calls are: a worker thread owns the process and its pipes,
 * and the caller waits on a shared flag for each answer (Node only; never in a guest).
 */

import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";

import { BY_CASE, type ErrorCase, Other } from "./errors.js";

/** The worker: starts krec, writes each call to it and hands each answer line back. */
const WORKER = `
const { workerData } = require("node:worker_threads");
const { spawn } = require("node:child_process");
const { port, flag, krec } = workerData;
const signal = new Int32Array(flag);
let ended = null;
let waiting = 0;
let buffered = "";
function answer(line) {
  port.postMessage(line);
  Atomics.store(signal, 0, 1);
  Atomics.notify(signal, 0);
}
function end(why) {
  if (ended !== null) return;
  ended = why;
  for (; waiting > 0; waiting--) answer(JSON.stringify({ ended }));
}
const child = spawn(krec, ["fake-cluster"], { stdio: ["pipe", "pipe", "inherit"] });
child.on("error", (err) => end("starting " + krec + " fake-cluster: " + err.message));
child.on("exit", (code, sig) => end("krec fake-cluster ended (" + (sig || "exit status " + code) + ")"));
child.stdin.on("error", () => {});
child.stdout.setEncoding("utf8");
child.stdout.on("data", (chunk) => {
  buffered += chunk;
  for (let at = buffered.indexOf("\\n"); at >= 0; at = buffered.indexOf("\\n")) {
    const line = buffered.slice(0, at);
    buffered = buffered.slice(at + 1);
    waiting--;
    answer(line);
  }
});
port.on("message", (line) => {
  if (line === null) {
    child.stdin.end();
    port.close();
    return;
  }
  if (ended !== null) return answer(JSON.stringify({ ended }));
  waiting++;
  child.stdin.write(line + "\\n");
});
`;

/** krec as `$KREC`, or the first `krec` on `PATH`. */
function findKrec(): string {
  const named = process.env.KREC;
  if (named) return named;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, "krec");
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  throw new Error(
    "FakeCluster: the fake cluster is krec's own API server store, and krec is not on PATH (nor in $KREC); install krec or set KREC to its path",
  );
}

/** How long one call may take before the fake cluster is called stuck. */
const CALL_TIMEOUT_MS = 60_000;

const finished = new FinalizationRegistry<{ port: MessagePort; worker: Worker }>(({ port, worker }) => {
  port.postMessage(null);
  void worker.terminate();
});

/** One `krec fake-cluster` process, called synchronously. */
export class KrecProcess {
  private readonly port: MessagePort;
  private readonly signal: Int32Array;

  constructor() {
    const krec = findKrec();
    const { port1, port2 } = new MessageChannel();
    const flag = new SharedArrayBuffer(4);
    const worker = new Worker(WORKER, { eval: true, workerData: { port: port2, flag, krec }, transferList: [port2] });
    // Neither keeps a test run alive: at exit the pipe closes and krec ends with it.
    worker.unref();
    port1.unref();
    this.port = port1;
    this.signal = new Int32Array(flag);
    finished.register(this, { port: port1, worker });
  }

  /** krec's answer to one call: its value, or the error it names thrown. */
  call(op: string, fields: Record<string, unknown>): unknown {
    Atomics.store(this.signal, 0, 0);
    this.port.postMessage(JSON.stringify({ op, ...fields }));
    if (Atomics.wait(this.signal, 0, 0, CALL_TIMEOUT_MS) === "timed-out") {
      throw new Error(`FakeCluster: krec fake-cluster did not answer a ${op} within ${CALL_TIMEOUT_MS / 1000} s`);
    }
    const received = receiveMessageOnPort(this.port);
    if (received === undefined) throw new Error(`FakeCluster: no answer to a ${op}`);
    const answer = JSON.parse(received.message as string) as {
      ok?: unknown;
      error?: { case: string; message: string };
      ended?: string;
    };
    if (answer.ended !== undefined) throw new Error(`FakeCluster: ${answer.ended}`);
    if (answer.error !== undefined) {
      const Class = BY_CASE[answer.error.case.replaceAll("_", "-") as ErrorCase] ?? Other;
      throw new Class(answer.error.message);
    }
    return answer.ok;
  }
}

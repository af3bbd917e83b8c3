/**
 * misbehave, in TypeScript: a hostile guest for the containment tests. The request's name says
 * what it does: `ok` returns, `loop` spins forever, `oom` allocates until it is stopped, `throw`
 * throws, `forbidden` reads what its manifest does not permit.
 */

import { Action, AdmissionRequest, Context, guest, kinds, Reconciler, Request, Validator, Verdict } from "@krec/guest";

export class Misbehave implements Reconciler {
  reconcile(req: Request, ctx: Context): Action {
    switch (req.name) {
      case "loop":
        for (;;) {
          // spin
        }
      case "oom": {
        const hoard: Uint8Array[] = [];
        for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
      }
      case "throw":
        throw new Error("misbehave was asked to throw");
      case "forbidden":
        ctx.get(kinds.Secret, "anything", "kube-system");
        return Action.done();
      default:
        return Action.done();
    }
  }
}

export class Judge implements Validator {
  validate(req: AdmissionRequest): Verdict {
    if (req.name === "loop") for (;;) {
      // spin
    }
    return Verdict.allow();
  }
}

export default guest({ reconciler: Misbehave, validator: Judge });

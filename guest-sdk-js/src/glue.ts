/**
 * A guest's parts (reconciler, validator, mutator, converter), built from its configuration
 * and called for the host: what the WebAssembly exports and the fake cluster share.
 */

import { mutated, Verdict, type AdmissionRequest, type Converter, type Mutator, type Validator } from "./admission.js";
import { Context, type Host } from "./context.js";
import { describe, Invalid, KrecError, Other } from "./errors.js";
import type { Kind, KObject } from "./kinds.js";
import { withHost } from "./log.js";
import { Action, Request, type Reconciler } from "./reconciler.js";

/** A class of a guest's part: built with the configuration when its constructor declares a parameter. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type PartClass<T> = new (config?: any) => T;

/** The classes of a guest's parts, as `guest()` takes them. */
export interface Parts {
  reconciler?: PartClass<Reconciler>;
  validator?: PartClass<Validator>;
  mutator?: PartClass<Mutator>;
  converter?: PartClass<Converter>;
}

type Built = { reconciler?: Reconciler; validator?: Validator; mutator?: Mutator; converter?: Converter };

/** A configuration the guest refuses: the host keeps the version running before. */
export class ConfigError extends Error {}

/** Whether `cls` is built with the configuration: its constructor declares a parameter. */
export function takesConfig(cls: PartClass<unknown>): boolean {
  return cls.length > 0;
}

/** The classes of a guest's parts and, once `init` ran, their instances. */
export class Guest {
  private built: Built | undefined;

  constructor(readonly parts: Parts) {
    const names = ["reconciler", "validator", "mutator", "converter"] as const;
    for (const name of names) {
      const cls = parts[name];
      if (cls !== undefined && typeof cls !== "function") {
        throw new TypeError(`guest({${name}}) takes a class, not ${String(cls)}`);
      }
    }
    if (!names.some((name) => parts[name] !== undefined)) {
      throw new TypeError("guest() needs a reconciler, validator, mutator or converter");
    }
  }

  /** Build every part from `spec.config` (JSON text; `null` for none); throws `ConfigError`. */
  init(config: string): void {
    if (this.built) return;
    let settings: unknown;
    try {
      settings = JSON.parse(config);
    } catch (err) {
      throw new ConfigError(`spec.config: not JSON: ${describe(err)}`);
    }
    const present = Object.entries(this.parts).filter(([, cls]) => cls !== undefined) as Array<
      [keyof Built, PartClass<unknown>]
    >;
    const anyTakes = present.some(([, cls]) => takesConfig(cls));
    const empty = settings === null || (typeof settings === "object" && !Array.isArray(settings) && Object.keys(settings as object).length === 0);
    if (!anyTakes && !empty) {
      throw new ConfigError(
        "spec.config: this guest takes no configuration: remove spec.config, or give the reconciler (or a webhook) a constructor(config)",
      );
    }
    const built: Built = {};
    for (const [name, cls] of present) {
      try {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        (built as any)[name] = takesConfig(cls) ? new cls(settings) : new cls();
      } catch (err) {
        throw new ConfigError(`spec.config: ${describe(err)}`);
      }
    }
    this.built = built;
  }

  /** The built part `name` (built without configuration if `init` never ran). */
  part<K extends keyof Built>(name: K): Built[K] {
    if (!this.built) this.init("null");
    return (this.built as Built)[name];
  }

  private reconcilerPart(): Reconciler {
    let reconciler: Reconciler | undefined;
    try {
      reconciler = this.part("reconciler");
    } catch (err) {
      throw new Invalid(err instanceof Error ? err.message : String(err));
    }
    if (!reconciler) throw new Other("this guest exports no reconciler (guest({reconciler}))");
    return reconciler;
  }

  /** Run the reconciler for `req`: its action, or a `KrecError` (anything else thrown becomes `Other`). */
  reconcile(host: Host, req: Request): Action {
    const reconciler = this.reconcilerPart();
    let action: Action | void;
    try {
      action = withHost(host, () => reconciler.reconcile(req, new Context(host)));
    } catch (err) {
      if (err instanceof KrecError) throw err;
      throw new Other(describe(err));
    }
    if (action === undefined) return Action.done();
    if (!(action instanceof Action)) {
      throw new Other(`reconcile returned ${JSON.stringify(action)}: return an Action (or nothing for done)`);
    }
    return action;
  }

  /** Run the reconciler's `map` for an event on `obj`. */
  map(host: Host, kind: Kind, obj: KObject): Request[] {
    const reconciler = this.reconcilerPart();
    if (!reconciler.map) throw new Other(`this reconciler maps no ${kind.kind}: implement map`);
    try {
      // A read-only context: the host refuses writes while mapping.
      return withHost(host, () => (reconciler.map as NonNullable<Reconciler["map"]>)(kind, obj, new Context(host)));
    } catch (err) {
      if (err instanceof KrecError) throw err;
      throw new Other(describe(err));
    }
  }

  /** Run the validator; a throw propagates (the review traps: failurePolicy decides). */
  validate(host: Host, req: AdmissionRequest): Verdict {
    const validator = this.part("validator");
    if (!validator) throw new Error("this guest exports no validator (guest({validator}))");
    return checked(withHost(host, () => validator.validate(req, new Context(host))));
  }

  /** Run the mutator: its verdict and the object it left (`undefined`: unchanged). */
  mutate(host: Host, req: AdmissionRequest): [Verdict, KObject | undefined] {
    const mutator = this.part("mutator");
    if (!mutator) throw new Error("this guest exports no mutator (guest({mutator}))");
    const [verdict, obj] = withHost(host, () => mutated(mutator, req, new Context(host)));
    return [checked(verdict), obj];
  }

  /** Convert each object to `desired`; throws a message naming the failure. */
  convert(host: Host, objects: string[], desired: string): string[] {
    let converter: Converter | undefined;
    try {
      converter = this.part("converter");
    } catch (err) {
      throw err instanceof Error ? err.message : String(err);
    }
    if (!converter) throw "this guest exports no converter (guest({converter}))";
    const c = converter;
    return withHost(host, () =>
      objects.map((text) => {
        try {
          return JSON.stringify(c.convert(JSON.parse(text) as KObject, desired));
        } catch (err) {
          throw describe(err);
        }
      }),
    );
  }
}

function checked(verdict: unknown): Verdict {
  if (!(verdict instanceof Verdict)) {
    throw new TypeError(`the webhook returned ${JSON.stringify(verdict)}: return a Verdict`);
  }
  return verdict;
}

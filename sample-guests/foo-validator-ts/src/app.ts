/**
 * foo-validator, in TypeScript: the same validating webhook as the Rust `foo-validator`.
 *
 * A Foo is denied when its `spec.deploymentName` is not a valid Deployment name (a DNS-1123
 * subdomain) or is already used by another Foo in the same namespace — found with a `list` from
 * the host's cache, so two Foos never fight over one Deployment.
 */

import { AdmissionRequest, Context, guest, Kind, type KObject, Validator, Verdict } from "@krec/guest";

/** The sample-controller's Foo. */
export const Foo = new Kind("samplecontroller.k8s.io/v1alpha1", "Foo");

const encoder = new TextEncoder();

/** Why `name` is not a DNS-1123 subdomain (what a Deployment's name must be), if it is not. */
export function dnsSubdomainProblem(name: string): string | undefined {
  if (name === "") return "must not be empty";
  if (encoder.encode(name).length > 253) return "must be no more than 253 characters";
  const valid = name
    .split(".")
    .every((label) => label !== "" && /^[a-z0-9-]+$/.test(label) && !label.startsWith("-") && !label.endsWith("-"));
  return valid
    ? undefined
    : "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
}

/** `text` quoted as the Rust sample quotes it (`{:?}`), so both answer the same message. */
export function quote(text: string): string {
  return JSON.stringify(text)
    .replace(/\\u0000/g, "\\0")
    .replace(/\\u00([0-9a-f]{2})/g, (_, hex: string) => `\\u{${parseInt(hex, 16).toString(16)}}`);
}

const deploymentName = (foo: KObject): string => foo.spec?.deploymentName ?? "";

export class FooValidator implements Validator {
  validate(req: AdmissionRequest, ctx: Context): Verdict {
    const foo = req.object;
    if (!foo) return Verdict.allow();
    const wanted = deploymentName(foo);
    const problem = dnsSubdomainProblem(wanted);
    if (problem) return Verdict.invalid(`spec.deploymentName: Invalid value: ${quote(wanted)}: ${problem}`);
    // A failed list throws: the review traps, so the API server's failurePolicy decides.
    const others = ctx.list(Foo, { namespace: req.namespace });
    const me = foo.metadata?.name ?? req.name;
    const other = others.find((o) => deploymentName(o) === wanted && o.metadata.name !== me);
    if (other) {
      return Verdict.invalid(
        `spec.deploymentName: Duplicate value: ${quote(wanted)}: already used by Foo ${quote(other.metadata.name ?? "")} in namespace ${quote(req.namespace ?? "")}`,
      );
    }
    return Verdict.allow();
  }
}

export default guest({ validator: FooValidator });

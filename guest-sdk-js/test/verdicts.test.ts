/**
 * The fake cluster judges as the cluster does: the invalid objects of tests/verdicts/cases.json,
 * written through a guest's Context, get the verdicts the host gives under krec dev
 * (tests/verdicts/expected.json, which krec's own test holds the host and the Rust fake to).
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Context, KrecError, type KObject } from "../src/index.js";
import { FakeCluster } from "../src/testing.js";

// dist/test/ → the repository.
const repo = fileURLToPath(new URL("../../../", import.meta.url));
const cases = JSON.parse(readFileSync(`${repo}tests/verdicts/cases.json`, "utf8")) as {
  crds: string[];
  cases: Array<{ name: string; call?: string; before?: KObject[]; object: KObject }>;
};
const expected = JSON.parse(readFileSync(`${repo}tests/verdicts/expected.json`, "utf8")) as {
  verdicts: Array<{ name: string; verdict: string }>;
};

function verdict(call: () => unknown): string {
  try {
    call();
    return "ok";
  } catch (err) {
    if (err instanceof KrecError) return `${err.case}: ${err.message}`;
    throw err;
  }
}

test("every case should get the host's verdict", () => {
  const cluster = new FakeCluster().addFiles(...cases.crds.map((crd) => `${repo}${crd}`));
  const ctx = new Context(cluster);
  const got = cases.cases.map((c) => {
    for (const before of c.before ?? []) ctx.create(before);
    const call = c.call === "update" ? () => ctx.update(c.object) : () => ctx.create(c.object);
    return { name: c.name, verdict: verdict(call) };
  });
  assert.ok(got.length >= 20);
  got.forEach((have, i) => assert.deepEqual(have, expected.verdicts[i]));
  assert.equal(got.length, expected.verdicts.length);
});

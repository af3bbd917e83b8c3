// The TypeScript in docs/guide.md type-checks as written against this SDK, and the reconciler
// it defines reconciles on the fake cluster.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

// The SDK's folder (tests run from dist/test).
const SDK = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const GUIDE = join(SDK, "..", "docs", "guide.md");

const blocks = (): string[] => [...readFileSync(GUIDE, "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);

test("every ts block of the guide should type-check against the SDK", () => {
  const found = blocks();
  assert.ok(found.length > 0, `no ts block in ${GUIDE}`);
  found.forEach((block, i) => {
    // A guest project of its own, linking this SDK as `npm install` would.
    const project = mkdtempSync(join(tmpdir(), "krec-guide-"));
    mkdirSync(join(project, "node_modules", "@krec"), { recursive: true });
    symlinkSync(SDK, join(project, "node_modules", "@krec", "guest"));
    writeFileSync(join(project, "app.ts"), block);
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, skipLibCheck: true },
        include: ["app.ts"],
      }),
    );
    writeFileSync(join(project, "package.json"), JSON.stringify({ type: "module" }));
    const tsc = join(SDK, "node_modules", "typescript", "bin", "tsc");
    const run = spawnSync(process.execPath, [tsc, "-p", project], { encoding: "utf8" });
    assert.equal(run.status, 0, `the guide's ts block ${i + 1} does not type-check:\n${run.stdout}${run.stderr}`);
  });
});

test("the guide's reconciler should mark a deployment", async () => {
  const project = mkdtempSync(join(tmpdir(), "krec-guide-run-"));
  mkdirSync(join(project, "node_modules", "@krec"), { recursive: true });
  symlinkSync(SDK, join(project, "node_modules", "@krec", "guest"));
  writeFileSync(join(project, "package.json"), JSON.stringify({ type: "module" }));
  const { transform } = await import("esbuild");
  const { code } = await transform(blocks()[0], { loader: "ts", format: "esm" });
  writeFileSync(join(project, "app.js"), code);
  const app = await import(join(project, "app.js"));
  const { FakeCluster } = await import("../src/testing.js");
  const { Action, Request, kinds } = await import("../src/index.js");
  const cluster = new FakeCluster([{ apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "web", namespace: "default" }, spec: { selector: { matchLabels: { app: "web" } }, template: { metadata: { labels: { app: "web" } }, spec: { containers: [{ name: "web", image: "nginx" }] } } } }]);
  const marker = new app.Marker({ annotation: "example.com/seen" });
  assert.deepEqual(cluster.reconcile(marker, new Request("default", "web")), Action.done());
  assert.deepEqual(cluster.object(kinds.Deployment, "web", "default")?.metadata.annotations, { "example.com/seen": "seen" });
});

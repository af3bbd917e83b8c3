#!/usr/bin/env node
// krec-guest: build a TypeScript (or JavaScript) krec guest into a WebAssembly component, and
// run its unit tests natively.
//
//   krec-guest build src/app.ts -o app.wasm   type-check, bundle (esbuild), componentize (componentize-js)
//   krec-guest test                           type-check, then node --test on test/**/*.test.ts
//
// The guest's main module default-exports `guest({...})`; the component exports what the krec
// WIT `controller` world asks for, through @krec/guest/wasm.

import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const WORLD = "controller";
const WORK = ".krec-build";

function fail(message) {
  console.error(`krec-guest: ${message}`);
  process.exit(2);
}

/**
 * Type-check the project with its tsconfig.json, with the SDK's TypeScript and Node.js types
 * (tests run under Node.js; a guest's own code should use only what the SDK gives it).
 */
function typecheck(project) {
  if (!existsSync(join(project, "tsconfig.json"))) return;
  const tsc = join(SDK, "node_modules", "typescript", "bin", "tsc");
  const types = ["--typeRoots", join(SDK, "node_modules", "@types"), "--types", "node"];
  const run = spawnSync(process.execPath, [tsc, "-p", project, "--noEmit", ...types], { stdio: "inherit" });
  if (run.status !== 0) process.exit(run.status ?? 1);
}

/** Every file under `dir` whose name passes `keep`. */
function files(dir, keep) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (name === "node_modules" || name === WORK) return [];
    return statSync(path).isDirectory() ? files(path, keep) : keep(name) ? [path] : [];
  });
}

async function build(args) {
  const at = args.indexOf("-o");
  const output = at >= 0 ? args[at + 1] : undefined;
  const entry = args.find((arg, i) => !arg.startsWith("-") && i !== at + 1);
  if (!entry || !output) fail("usage: krec-guest build <main module> -o <component.wasm>");
  const project = process.cwd();
  const main = resolve(entry);
  if (!existsSync(main)) fail(`no module ${entry} in ${project}`);
  typecheck(project);

  const work = join(project, WORK);
  mkdirSync(work, { recursive: true });
  // The component's module: the guest's default export, exported as the WIT world's functions.
  const wrapper = join(work, "component.mjs");
  let spec = relative(work, main).split(sep).join("/");
  if (!spec.startsWith(".")) spec = `./${spec}`;
  writeFileSync(
    wrapper,
    `import guest from ${JSON.stringify(spec)};\n` +
      `import { exportsOf } from "@krec/guest/wasm";\n` +
      `export const { init, reconcile, map, validate, mutate, convert } = exportsOf(guest);\n`,
  );
  const { build: bundle } = await import("esbuild");
  const bundled = join(work, "bundle.js");
  await bundle({
    entryPoints: [wrapper],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    external: ["krec:*"],
    mainFields: ["module", "main"],
    outfile: bundled,
    logLevel: "warning",
    // A guest project that links the SDK from a checkout resolves its own copy of nothing else.
    nodePaths: [join(SDK, "node_modules")],
  });

  const { componentize } = await import("@bytecodealliance/componentize-js");
  const started = Date.now();
  const { component } = await componentize({
    sourcePath: bundled,
    witPath: join(SDK, "wit"),
    worldName: WORLD,
    // A guest reaches the cluster only through krec's imports: no fetch, no HTTP server.
    disableFeatures: ["http", "fetch-event"],
  });
  const out = resolve(output);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, component);
  console.log(`built ${output} (${(component.length / 1e6).toFixed(1)} MB, ${((Date.now() - started) / 1000).toFixed(1)} s)`);
}

async function test() {
  const project = process.cwd();
  typecheck(project);
  const sources = files(project, (name) => name.endsWith(".ts") && !name.endsWith(".d.ts"));
  const native = join(project, WORK, "native");
  rmSync(native, { recursive: true, force: true });
  const { build: transpile } = await import("esbuild");
  // Each file as it is (no bundling): tests import the guest's modules and @krec/guest.
  await transpile({
    entryPoints: sources,
    outdir: native,
    outbase: project,
    format: "esm",
    platform: "node",
    target: "es2022",
    logLevel: "warning",
  });
  const tests = files(native, (name) => name.endsWith(".test.js"));
  if (!tests.length) fail("no tests (files named *.test.ts)");
  const run = spawnSync(process.execPath, ["--test", ...tests], { stdio: "inherit" });
  process.exit(run.status ?? 1);
}

const [command, ...rest] = process.argv.slice(2);
if (command === "build") await build(rest);
else if (command === "test") await test();
else fail("usage: krec-guest build <main module> -o <component.wasm> | krec-guest test");

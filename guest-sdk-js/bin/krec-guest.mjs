#!/usr/bin/env node
// krec-guest: build a TypeScript (or JavaScript) krec guest into a WebAssembly component, and
// run its unit tests natively.
//
//   krec-guest build src/app.ts -o app.wasm   type-check, bundle (esbuild), componentize (componentize-js)
//   krec-guest build src/app.ts -o app.wasm --dev [--watch]
//                                             a dev build for krec dev's edit loop (below)
//   krec-guest dev src/app.ts -o app.wasm [-- krec dev's flags]
//                                             the dev build, its bundle rebuilt on every save,
//                                             and `krec dev --manifests .` running it
//   krec-guest test                           type-check, then node --test on test/**/*.test.ts
//
// A dev build is the component with a loader in place of the guest's code: SpiderMonkey and
// the SDK, pre-initialised once (the slow part: tens of seconds), and a loader that reads the
// guest's bundle (.krec-build/dev/guest.js, esbuild's output: milliseconds) through krec dev's
// `krec:dev/sources` import each time an instance starts. krec dev watches that folder: a saved
// edit runs as the next version in about a second, with no componentize and no compile. Outside
// krec dev a dev build refuses to start.
//
// The guest's main module default-exports `guest({...})`; the component exports what the krec
// WIT `controller` world asks for, through @krec/guest/wasm.

import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const WORLD = "controller";
const WORK = ".krec-build";
/** The dev build's world: the guest's, and krec dev's sources. */
const DEV_WORLD = "controller-dev";
/** The custom section naming a dev build's source folder (the host's `dev_source::SECTION`). */
const DEV_SECTION = "krec-dev-source";
/** What the loader reads from that folder: the guest's bundle. */
const DEV_BUNDLE = "guest.js";
/** The SDK's modules a guest's bundle imports, as the loader hands them over. */
const SDK_MODULES = ["@krec/guest", "@krec/guest/kinds"];

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

/** The options after `build` or `dev`: the main module, `-o`, flags, and what follows `--`. */
function parseArgs(args, usage) {
  const dashes = args.indexOf("--");
  const own = dashes >= 0 ? args.slice(0, dashes) : args;
  const rest = dashes >= 0 ? args.slice(dashes + 1) : [];
  const at = own.indexOf("-o");
  const output = at >= 0 ? own[at + 1] : undefined;
  const entry = own.find((arg, i) => !arg.startsWith("-") && i !== at + 1);
  if (!entry || !output) fail(`usage: ${usage}`);
  const flags = new Set(own.filter((arg) => arg.startsWith("--")));
  for (const flag of flags) {
    if (flag !== "--dev" && flag !== "--watch") fail(`unknown option ${flag}; usage: ${usage}`);
  }
  const project = process.cwd();
  const main = resolve(entry);
  if (!existsSync(main)) fail(`no module ${entry} in ${project}`);
  return { project, main, output: resolve(output), shown: output, flags, rest };
}

/** `spec` as an import specifier from a module in `from`. */
function specifier(from, path) {
  const spec = relative(from, path).split(sep).join("/");
  return spec.startsWith(".") ? spec : `./${spec}`;
}

/** Bundle `entry` (esbuild) into `outfile`; `options` add to or override the defaults. */
async function bundle(entry, outfile, options = {}) {
  const esbuild = await import("esbuild");
  const settings = {
    entryPoints: [entry],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    external: ["krec:*"],
    mainFields: ["module", "main"],
    outfile,
    logLevel: "warning",
    // A guest project that links the SDK from a checkout resolves its own copy of nothing else.
    nodePaths: [join(SDK, "node_modules")],
    ...options,
  };
  if (!options.watch) return esbuild.build(settings);
  const { watch, ...rest } = settings;
  const context = await esbuild.context({ ...rest, plugins: [...(rest.plugins ?? []), watch] });
  await context.watch();
  return context;
}

/** componentize-js on `source` for `world` of the WIT in `witPath`: the component's bytes. */
async function componentize(source, witPath, world) {
  const { componentize: run } = await import("@bytecodealliance/componentize-js");
  const { component } = await run({
    sourcePath: source,
    witPath,
    worldName: world,
    // A guest reaches the cluster only through krec's imports: no fetch, no HTTP server.
    disableFeatures: ["http", "fetch-event"],
  });
  return component;
}

function write(out, bytes) {
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, bytes);
}

async function build(args) {
  const usage = "krec-guest build <main module> -o <component.wasm> [--dev [--watch]]";
  const { project, main, output, shown, flags } = parseArgs(args, usage);
  if (flags.has("--watch") && !flags.has("--dev")) fail("--watch is for dev builds: add --dev");
  typecheck(project);
  if (flags.has("--dev")) {
    await devBuild(project, main, output, shown);
    if (flags.has("--watch")) await watchBundle(project, main);
    return;
  }

  const work = join(project, WORK);
  mkdirSync(work, { recursive: true });
  // The component's module: the guest's default export, exported as the WIT world's functions.
  const wrapper = join(work, "component.mjs");
  writeFileSync(
    wrapper,
    `import guest from ${JSON.stringify(specifier(work, main))};\n` +
      `import { exportsOf } from "@krec/guest/wasm";\n` +
      `export const { init, reconcile, map, validate, mutate, convert } = exportsOf(guest);\n`,
  );
  const bundled = join(work, "bundle.js");
  await bundle(wrapper, bundled);
  const started = Date.now();
  const component = await componentize(bundled, join(SDK, "wit"), WORLD);
  write(output, component);
  console.log(`built ${shown} (${(component.length / 1e6).toFixed(1)} MB, ${((Date.now() - started) / 1000).toFixed(1)} s)`);
}

/**
 * The dev loader: the component's module in a dev build. Each instance reads the guest's bundle
 * through krec dev's `krec:dev/sources` when the host first calls it, evaluates it with the
 * SDK's modules handed over as `require`, and answers through the guest's exports.
 */
const LOADER = `import * as sdk from "@krec/guest";
import * as kinds from "@krec/guest/kinds";
import { exportsOf } from "@krec/guest/wasm";
import { read } from "krec:dev/sources@0.1.0";

const MODULES = { "@krec/guest": sdk, "@krec/guest/kinds": kinds };
let loaded;

/** The loader's own refusals: said as they are, without the loader's stack. */
class DevBuildError extends Error {}

function load() {
  if (loaded) return loaded;
  let text;
  try {
    text = read(${JSON.stringify(DEV_BUNDLE)});
  } catch (err) {
    throw new DevBuildError("dev build: " + (err && err.payload !== undefined ? err.payload : String(err)));
  }
  const module = { exports: {} };
  const require = (name) => {
    if (Object.prototype.hasOwnProperty.call(MODULES, name)) return MODULES[name];
    throw new DevBuildError("dev build: " + name + " is not in the component (krec-guest build --dev again)");
  };
  new Function("module", "exports", "require", text)(module, module.exports, require);
  const guest = module.exports.default;
  if (!guest || typeof guest.reconcile !== "function") {
    throw new DevBuildError("dev build: the main module's default export is not guest({...})");
  }
  loaded = exportsOf(guest);
  return loaded;
}

export function init(config) {
  try {
    load();
  } catch (err) {
    if (err instanceof DevBuildError) return { tag: "err", val: err.message };
    // The guest's code failed to load: where, in its bundle.
    return { tag: "err", val: err && err.stack ? String(err) + "\\n" + err.stack : String(err) };
  }
  return loaded.init(config);
}
export const reconcile = (req) => load().reconcile(req);
export const map = (kind, object) => load().map(kind, object);
export const validate = (req) => load().validate(req);
export const mutate = (req) => load().mutate(req);
export const convert = (objects, version) => load().convert(objects, version);
`;

/** A WebAssembly custom section `name` holding `text` (UTF-8). */
function customSection(name, text) {
  const leb = (n) => {
    const out = [];
    do {
      let byte = n & 0x7f;
      n >>>= 7;
      if (n) byte |= 0x80;
      out.push(byte);
    } while (n);
    return out;
  };
  const nameBytes = Buffer.from(name, "utf8");
  const body = Buffer.concat([Buffer.from(leb(nameBytes.length)), nameBytes, Buffer.from(text, "utf8")]);
  return Buffer.concat([Buffer.from([0]), Buffer.from(leb(body.length)), body]);
}

/** The guest's bundle for the loader: CommonJS, the SDK left to the loader's copy. */
function bundleForLoader(main, out, watch) {
  return bundle(main, out, {
    format: "cjs",
    external: ["krec:*", ...SDK_MODULES],
    // Errors name the bundle's file and line (readable: not minified).
    footer: { js: `//# sourceURL=${out}` },
    ...(watch ? { watch } : {}),
  });
}

/**
 * A dev build at `output`: the loader componentized once — again only when the SDK or its
 * tools changed (a stamp beside the loader) — with a section naming the bundle's folder; then
 * the bundle.
 */
async function devBuild(project, main, output, shown) {
  const work = join(project, WORK);
  const folder = join(work, "dev");
  mkdirSync(folder, { recursive: true });
  await bundleForLoader(main, join(folder, DEV_BUNDLE));

  const loaderWork = join(work, "dev-loader");
  mkdirSync(loaderWork, { recursive: true });
  // The WIT: the guest's world and krec:dev/sources.
  const wit = join(loaderWork, "wit");
  rmSync(wit, { recursive: true, force: true });
  mkdirSync(join(wit, "deps"), { recursive: true });
  cpSync(join(SDK, "wit"), join(wit, "deps", "reconciler"), { recursive: true });
  cpSync(join(SDK, "wit-dev"), join(wit, "deps", "dev"), { recursive: true });
  writeFileSync(
    join(wit, "world.wit"),
    `package krec:guest-dev;\n\nworld ${DEV_WORLD} {\n  include krec:reconciler/controller@0.1.2;\n  import krec:dev/sources@0.1.0;\n}\n`,
  );
  const source = join(loaderWork, "loader.mjs");
  writeFileSync(source, LOADER);
  const bundled = join(loaderWork, "bundle.js");
  await bundle(source, bundled);
  // Componentized again only when what goes in changed: the loader with the SDK, the WIT,
  // componentize-js.
  const digest = createHash("sha256");
  digest.update(readFileSync(bundled));
  for (const file of files(wit, (name) => name.endsWith(".wit")).sort()) digest.update(readFileSync(file));
  digest.update(readFileSync(join(SDK, "node_modules", "@bytecodealliance", "componentize-js", "package.json")));
  const stamp = digest.digest("hex");
  const stampFile = join(loaderWork, "stamp");
  const cached = join(loaderWork, "loader.wasm");
  let loader;
  if (existsSync(cached) && existsSync(stampFile) && readFileSync(stampFile, "utf8") === stamp) {
    loader = readFileSync(cached);
  } else {
    const started = Date.now();
    console.log("componentizing the dev loader (once per SDK version)…");
    loader = await componentize(bundled, wit, DEV_WORLD);
    console.log(`the dev loader: ${(loader.length / 1e6).toFixed(1)} MB, ${((Date.now() - started) / 1000).toFixed(1)} s`);
    writeFileSync(cached, loader);
    writeFileSync(stampFile, stamp);
  }
  write(output, Buffer.concat([loader, customSection(DEV_SECTION, folder)]));
  console.log(`built ${shown}: a dev build — krec dev runs ${relative(project, join(folder, DEV_BUNDLE))}, rebuilt by --watch or krec-guest dev`);
}

/** Rebuild the bundle on every save until stopped; the context, to dispose of. */
async function watchBundle(project, main) {
  const out = join(project, WORK, "dev", DEV_BUNDLE);
  const watch = {
    name: "krec-dev-report",
    setup(build) {
      let first = true;
      build.onEnd((result) => {
        if (first) {
          first = false;
          return;
        }
        const when = new Date().toLocaleTimeString();
        if (result.errors.length) console.error(`krec-guest: ${when}: not rebuilt (${result.errors.length} error(s) above); krec dev keeps the version before`);
        else console.log(`krec-guest: ${when}: rebuilt ${relative(project, out)}`);
      });
    },
  };
  console.log("krec-guest: watching the guest's sources (Ctrl-C to stop); type-check with `krec-guest test` or your editor");
  return bundleForLoader(main, out, watch);
}

/** `krec-guest dev`: the dev build, the bundle rebuilt on every save, and `krec dev` running it. */
async function dev(args) {
  const usage = "krec-guest dev <main module> -o <component.wasm> [-- krec dev's flags]";
  const { project, main, output, shown, rest } = parseArgs(args, usage);
  typecheck(project);
  await devBuild(project, main, output, shown);
  const context = await watchBundle(project, main);
  const krec = process.env.KREC || "krec";
  const flags = rest.includes("--manifests") ? rest : ["--manifests", ".", ...rest];
  const child = spawn(krec, ["dev", ...flags], { stdio: "inherit" });
  const stop = (signal) => child.kill(signal);
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  const code = await new Promise((done) => {
    child.on("error", (err) => {
      console.error(`krec-guest: cannot run ${krec}: ${err.message} (install krec, or set KREC to its path)`);
      done(2);
    });
    child.on("exit", (status, signal) => done(status ?? (signal ? 0 : 1)));
  });
  await context.dispose();
  process.exit(code);
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
else if (command === "dev") await dev(rest);
else if (command === "test") await test();
else fail("usage: krec-guest build <main module> -o <component.wasm> [--dev [--watch]] | krec-guest dev <main module> -o <component.wasm> | krec-guest test");

/** JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the diff between two objects. */

import { Invalid } from "./errors.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

const isObject = (v: unknown): v is Record<string, Json> => typeof v === "object" && v !== null && !Array.isArray(v);
const clone = <T>(v: T): T => (v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T));

/** `target` with the merge patch `patch` applied (`null` removes a field). */
export function mergePatch(target: Json, patch: Json): Json {
  if (!isObject(patch)) return clone(patch);
  const result: Record<string, Json> = isObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = mergePatch(result[key], value);
  }
  return result;
}

function pointer(path: string): string[] {
  if (path === "") return [];
  if (!path.startsWith("/")) throw new Invalid(`JSON patch path ${JSON.stringify(path)} does not start with /`);
  return path.slice(1).split("/").map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function parentOf(doc: Json, tokens: string[], path: string): [Json, string] {
  let at = doc;
  for (const token of tokens.slice(0, -1)) {
    at = Array.isArray(at) ? at[Number(token)] : isObject(at) ? at[token] : undefined;
    if (at === undefined) throw new Invalid(`JSON patch path ${JSON.stringify(path)} does not exist`);
  }
  return [at, tokens[tokens.length - 1]];
}

function getAt(doc: Json, path: string): Json {
  const tokens = pointer(path);
  if (!tokens.length) return doc;
  const [parent, last] = parentOf(doc, tokens, path);
  const value = Array.isArray(parent) ? parent[Number(last)] : isObject(parent) && last in parent ? parent[last] : undefined;
  if (value === undefined) throw new Invalid(`JSON patch path ${JSON.stringify(path)} does not exist`);
  return value;
}

/** `doc` with the JSON patch `operations` applied; throws `Invalid` (the whole patch fails). */
export function applyJsonPatch(doc: Json, operations: Json): Json {
  if (!Array.isArray(operations)) throw new Invalid("a JSON patch is a list of operations");
  let out = clone(doc);
  const add = (path: string, value: Json, replace: boolean) => {
    const tokens = pointer(path);
    if (!tokens.length) {
      out = value;
      return;
    }
    if (replace) getAt(out, path);
    const [parent, last] = parentOf(out, tokens, path);
    if (Array.isArray(parent)) {
      const index = last === "-" ? parent.length : Number(last);
      if (!(index >= 0 && index <= parent.length)) throw new Invalid(`JSON patch path ${JSON.stringify(path)}: index out of range`);
      parent.splice(index, replace ? 1 : 0, value);
    } else if (isObject(parent)) parent[last] = value;
    else throw new Invalid(`JSON patch path ${JSON.stringify(path)} does not exist`);
  };
  const remove = (path: string) => {
    getAt(out, path);
    const [parent, last] = parentOf(out, pointer(path), path);
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else delete parent[last];
  };
  for (const op of operations) {
    const path = op.path ?? "";
    switch (op.op) {
      case "add":
        add(path, clone(op.value), false);
        break;
      case "remove":
        remove(path);
        break;
      case "replace":
        add(path, clone(op.value), true);
        break;
      case "move":
      case "copy": {
        const value = clone(getAt(out, op.from ?? ""));
        if (op.op === "move") remove(op.from ?? "");
        add(path, value, false);
        break;
      }
      case "test":
        if (JSON.stringify(getAt(out, path)) !== JSON.stringify(op.value)) {
          throw new Invalid(`JSON patch test failed at ${JSON.stringify(path)}`);
        }
        break;
      default:
        throw new Invalid(`unknown JSON patch operation ${JSON.stringify(op.op)}`);
    }
  }
  return out;
}

const escape = (key: string) => key.replace(/~/g, "~0").replace(/\//g, "~1");

/** The JSON patch from `before` to `after` (a changed list or scalar is replaced whole). */
export function diff(before: Json, after: Json, path = ""): Json[] {
  if (isObject(before) && isObject(after)) {
    const ops: Json[] = [];
    for (const key of Object.keys(before)) if (!(key in after)) ops.push({ op: "remove", path: `${path}/${escape(key)}` });
    for (const [key, value] of Object.entries(after)) {
      const child = `${path}/${escape(key)}`;
      if (!(key in before)) ops.push({ op: "add", path: child, value });
      else ops.push(...diff(before[key], value, child));
    }
    return ops;
  }
  return JSON.stringify(before) === JSON.stringify(after) ? [] : [{ op: "replace", path, value: after }];
}

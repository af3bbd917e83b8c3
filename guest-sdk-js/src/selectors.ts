/**
 * Label selectors: a `LabelSelector` object rendered as the text host calls take, and the
 * text parsed and matched (what the fake cluster filters with, as kube-apiserver does).
 */

import { Invalid } from "./errors.js";

/** A `LabelSelector`: `matchLabels` and `matchExpressions`. */
export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: Array<{ key: string; operator: string; values?: string[] }>;
}

/**
 * `selector` as selector text (`app=web,tier in (be,fe)`); `undefined` when it selects
 * everything. Throws `Invalid` for an unknown operator.
 */
export function selectorString(selector: LabelSelector | undefined | null): string | undefined {
  if (!selector) return undefined;
  const parts = Object.entries(selector.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`);
  for (const expr of selector.matchExpressions ?? []) {
    const values = [...(expr.values ?? [])].sort().join(",");
    switch (expr.operator) {
      case "In":
        parts.push(`${expr.key} in (${values})`);
        break;
      case "NotIn":
        parts.push(`${expr.key} notin (${values})`);
        break;
      case "Exists":
        parts.push(expr.key);
        break;
      case "DoesNotExist":
        parts.push(`!${expr.key}`);
        break;
      default:
        throw new Invalid(`unknown label selector operator ${JSON.stringify(expr.operator)} for key ${JSON.stringify(expr.key)}`);
    }
  }
  return parts.length ? parts.join(",") : undefined;
}

/** One term of a selector. */
interface Requirement {
  key: string;
  operator: "=" | "!=" | "in" | "notin" | "exists" | "!exists";
  values: string[];
}

const TERM =
  /\s*(?:!\s*([^\s,=!()]+)|([^\s,=!()]+)\s*(?:(==|=|!=)\s*([^\s,()]*)|\s+(in|notin)\s*\(([^)]*)\))?)\s*(?:,|$)/y;

/** Parse selector text; throws `Invalid`. */
export function parseSelector(text: string | undefined): Requirement[] {
  const requirements: Requirement[] = [];
  if (!text || !text.trim()) return requirements;
  let at = 0;
  while (at < text.length) {
    TERM.lastIndex = at;
    const m = TERM.exec(text);
    if (!m || m.index !== at || TERM.lastIndex === at) {
      throw new Invalid(`unable to parse requirement: ${JSON.stringify(text.slice(at))} in label selector ${JSON.stringify(text)}`);
    }
    if (m[1]) requirements.push({ key: m[1], operator: "!exists", values: [] });
    else if (m[3]) requirements.push({ key: m[2], operator: m[3] === "!=" ? "!=" : "=", values: [m[4]] });
    else if (m[5]) {
      const values = m[6].split(",").map((v) => v.trim()).filter(Boolean);
      requirements.push({ key: m[2], operator: m[5] as "in" | "notin", values });
    } else requirements.push({ key: m[2], operator: "exists", values: [] });
    at = TERM.lastIndex;
  }
  return requirements;
}

/** Whether `labels` satisfy every term of selector `text`. */
export function matchesSelector(text: string | undefined, labels: Record<string, string> | undefined): boolean {
  const have = labels ?? {};
  return parseSelector(text).every(({ key, operator, values }) => {
    const present = Object.prototype.hasOwnProperty.call(have, key);
    switch (operator) {
      case "exists":
        return present;
      case "!exists":
        return !present;
      case "=":
      case "in":
        return present && values.includes(have[key]);
      default:
        return !present || !values.includes(have[key]);
    }
  });
}

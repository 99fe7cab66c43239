/**
 * Canonical JSON and digests (SPEC 3 and SPEC 4 rule 1).
 *
 * Canonical JSON is UTF-8, object keys sorted by Unicode code point, no
 * insignificant whitespace, strings escaped minimally. `JSON.stringify`
 * already escapes strings and prints numbers as RFC 8785 asks; what it does
 * not do is sort keys, so objects are rebuilt with sorted keys first.
 */
import { createHash } from "node:crypto";
import type { StartRun } from "./types.js";

/** The canonical form of any JSON value. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) {
    return `[${value.map(canonicalJson).join(",")}]`;
  }
  if (value !== null && typeof value === "object") {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj)
      .filter((k) => obj[k] !== undefined)
      .sort(byCodePoint);
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(",")}}`;
  }
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`not a JSON value: ${typeof value}`);
  return text;
}

/**
 * Compares two strings by Unicode code point. (JavaScript's default sort
 * compares UTF-16 code units, which differs for keys that mix characters
 * above U+FFFF with U+E000..U+FFFF.)
 */
export function byCodePoint(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = (x[i]?.codePointAt(0) ?? 0) - (y[i]?.codePointAt(0) ?? 0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

/** Lowercase hex sha256 of the UTF-8 bytes of `text`. */
export function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** The request digest of SPEC 3: sha256 of canonical `{"kind", "input"}`. */
export function requestDigest(kind: "execute" | "resume" | "retry", input: unknown): string {
  return sha256Hex(canonicalJson({ kind, input }));
}

/**
 * The start digest (SPEC 4 rule 1): every StartRun field, the key and the
 * request digest included, with `input` compared canonically. Two commits
 * with the same runId are a replay exactly when their start digests match.
 */
export function startDigest(s: StartRun): string {
  const fields: Record<string, unknown> = {
    sessionId: s.sessionId,
    runId: s.runId,
    expectedCurrentRunId: s.expectedCurrentRunId,
    input: s.input,
  };
  if (s.requestKey !== undefined) fields.requestKey = s.requestKey;
  if (s.requestDigest !== undefined) fields.requestDigest = s.requestDigest;
  return sha256Hex(canonicalJson(fields));
}

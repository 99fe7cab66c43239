/**
 * Canonical JSON and digests (SPEC 3 and SPEC 4 rule 1).
 *
 * Canonical JSON is UTF-8, object keys sorted by Unicode code point, no
 * insignificant whitespace, strings escaped minimally. `JSON.stringify`
 * already escapes strings and prints numbers as RFC 8785 asks; what it does
 * not do is sort keys, so objects are rebuilt with sorted keys first.
 *
 * A number kept as written (a `JsonNumber`, see json.ts) is canonicalised
 * by value: the ECMAScript form of its double, so `1`, `1.0`, `1e0` and
 * `1.00` are one input (SPEC 3 [[digest.numbers]]), `-0` and `1e-400` are
 * `0`, and an integer beyond 2^53 is its nearest double. A number beyond the
 * double's range (`1e400`, whose double is infinite) has no such form; it
 * is written as its exact decimal value in scientific notation, the
 * digits without leading or trailing zeros and the exponent signed:
 * `1e400`, `10E399` and `1.0e+400` are all `1e+400`, `-2.50e999` is
 * `-2.5e+999`. Those never equal a finite number's form, and two of them
 * are equal exactly when their values are (the suite sends none: SPEC 3
 * only promises numbers well inside the double range).
 */
import { createHash } from "node:crypto";
import { JsonNumber } from "./json.js";
import type { StartRun } from "./types.js";

/** The canonical form of any JSON value. */
export function canonicalJson(value: unknown): string {
  if (value instanceof JsonNumber) return canonicalNumber(value.text);
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

/** The canonical form of a JSON number's text (see the top of this file). */
export function canonicalNumber(text: string): string {
  const n = Number(text);
  if (Number.isFinite(n)) return JSON.stringify(n);
  // Beyond the double range: the exact value, normalised. `text` is a valid JSON number (JsonNumber checks).
  const m = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/.exec(text);
  if (m === null) throw new TypeError(`not a JSON number: ${text}`);
  const [, sign = "", int = "", frac = "", exp = "0"] = m;
  const all = int + frac;
  const lead = all.length - all.replace(/^0+/, "").length;
  const digits = all.slice(lead).replace(/0+$/, "");
  if (digits === "") return "0"; // unreachable (zero is finite), kept total
  // value = 0.DIGITS x 10^(exp + int.length - lead), so the exponent of D.IGITS is one less.
  const e = BigInt(exp) + BigInt(int.length - lead) - 1n;
  const mantissa = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${mantissa}e${e < 0n ? "-" : "+"}${e < 0n ? -e : e}`;
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

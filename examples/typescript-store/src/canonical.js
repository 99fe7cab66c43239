// @ts-check
/**
 * Canonical JSON (SPEC 3): UTF-8, object keys sorted, no insignificant
 * whitespace, strings escaped minimally. JSON.stringify already escapes
 * strings and prints numbers the way RFC 8785 asks; what it does not do is
 * sort keys, so objects are rebuilt here with sorted keys first.
 *
 * Keys are sorted by Unicode code point, as SPEC 3 says (and as reqkey's
 * reference does). JavaScript's default sort compares UTF-16 code units,
 * which differs from code point order only for keys that mix characters
 * above U+FFFF with U+E000..U+FFFF; `byCodePoint` makes it exact anyway.
 */
import { createHash } from "node:crypto";

/**
 * @param {unknown} value any JSON value
 * @returns {string} its canonical form
 */
export function canonicalJson(value) {
  if (Array.isArray(value)) {
    return `[${value.map(canonicalJson).join(",")}]`;
  }
  if (value !== null && typeof value === "object") {
    const obj = /** @type {Record<string, unknown>} */ (value);
    const keys = Object.keys(obj).sort(byCodePoint);
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/**
 * Compares two strings by Unicode code point.
 * @param {string} a @param {string} b
 */
export function byCodePoint(a, b) {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = /** @type {number} */ (x[i].codePointAt(0)) - /** @type {number} */ (y[i].codePointAt(0));
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

/**
 * @param {string} text
 * @returns {string} lowercase hex sha256 of the UTF-8 bytes
 */
export function sha256Hex(text) {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/**
 * The request digest of SPEC 3: sha256 of canonical {"kind", "input"}.
 * @param {"execute" | "resume" | "retry"} kind
 * @param {unknown} input
 */
export function requestDigest(kind, input) {
  return sha256Hex(canonicalJson({ kind, input }));
}

// @ts-check
/**
 * Canonical JSON (SPEC 3): UTF-8, object keys sorted, no insignificant
 * whitespace, strings escaped minimally. JSON.stringify already escapes
 * strings and prints numbers the way RFC 8785 asks; what it does not do is
 * sort keys, so objects are rebuilt here with sorted keys first.
 *
 * Keys are sorted by UTF-16 code unit (JavaScript's default sort), which is
 * code point order for every key outside the astral planes; RFC 8785 itself
 * sorts by UTF-16 code unit, so this is exactly its order.
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
    const keys = Object.keys(obj).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
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

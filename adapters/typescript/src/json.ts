/**
 * Lossless JSON: every number a client writes comes back as it was written
 * (SPEC 3 "Numbers are values, not spellings", SPEC 6
 * `[[certify.match.input-exact]]`).
 *
 * `JSON.parse` turns each number into a double, so `1e400` becomes
 * `Infinity` (and is written back as `null`), `18446744073709551616` comes
 * back as `18446744073709552000`, `-0` as `0` and `1.50` as `1.5`. Node 20
 * gives no access to a number's source text, so requests are parsed here:
 *
 * - a number whose text is exactly what `String(Number(text))` writes
 *   (`1`, `-7`, `0.5`, `1e+21`) is parsed to that plain `number`: nothing is
 *   lost, and a store sees ordinary values for ordinary input;
 * - any other number (`1.50`, `1.0`, `-0`, `1e400`, `1e-400`,
 *   `18446744073709551616`) is parsed to a `JsonNumber` holding its text,
 *   which `stringifyJson` writes back unchanged.
 *
 * Everything else parses as `JSON.parse` would (a `__proto__` key is an
 * ordinary own key, as there). Canonical JSON (canonical.ts) reads a
 * `JsonNumber` by value, so `1`, `1.0` and `1e0` still digest alike.
 */

/** A JSON number kept as the client wrote it. Immutable. */
export class JsonNumber {
  constructor(readonly text: string) {
    if (!NUMBER.test(text)) throw new SyntaxError(`not a JSON number: ${JSON.stringify(text)}`);
    Object.freeze(this);
  }

  /** Its value as a double (`Infinity`, `0` or a rounded value outside the double's range and precision). */
  valueOf(): number {
    return Number(this.text);
  }

  toString(): string {
    return this.text;
  }
}

/** RFC 8259's number grammar. */
const NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;
/** The same, anchored at the parser's position (sticky). */
const NUMBER_AT = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
/** A run of string characters needing no decoding (no quote, backslash or control character). */
const PLAIN_AT = /[^"\\\u0000-\u001f]*/y;

/** Arrays and objects nested deeper than this are refused (a bound on the parser's recursion). */
export const MAX_DEPTH = 1000;

/** A `number` for a number whose text is its ECMAScript form, else a `JsonNumber`. */
export function jsonNumber(text: string): number | JsonNumber {
  const n = Number(text);
  return String(n) === text ? n : new JsonNumber(text);
}

/**
 * Parses JSON text (RFC 8259), numbers kept as written (see above). Throws
 * a `SyntaxError` on malformed text or nesting deeper than `MAX_DEPTH`.
 */
export function parseJson(text: string): unknown {
  const p = new Parser(text);
  p.ws();
  const value = p.value(0);
  p.ws();
  if (p.i < text.length) p.fail("unexpected text after the JSON value");
  return value;
}

class Parser {
  i = 0;
  constructor(private readonly s: string) {}

  fail(what: string): never {
    throw new SyntaxError(`${what} at position ${this.i}`);
  }

  ws(): void {
    const s = this.s;
    while (this.i < s.length) {
      const c = s.charCodeAt(this.i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) this.i++;
      else break;
    }
  }

  value(depth: number): unknown {
    const s = this.s;
    const c = s[this.i];
    switch (c) {
      case "{":
        return this.object(depth + 1);
      case "[":
        return this.array(depth + 1);
      case '"':
        return this.string();
      case "t":
        return this.literal("true", true);
      case "f":
        return this.literal("false", false);
      case "n":
        return this.literal("null", null);
      default: {
        NUMBER_AT.lastIndex = this.i;
        const m = NUMBER_AT.exec(s);
        if (m === null) this.fail(c === undefined ? "unexpected end of JSON input" : `unexpected character ${JSON.stringify(c)}`);
        this.i += m[0].length;
        return jsonNumber(m[0]);
      }
    }
  }

  literal<T>(word: string, v: T): T {
    if (!this.s.startsWith(word, this.i)) this.fail(`unexpected token (expected ${word})`);
    this.i += word.length;
    return v;
  }

  object(depth: number): Record<string, unknown> {
    if (depth > MAX_DEPTH) this.fail(`nested deeper than ${MAX_DEPTH} levels`);
    this.i++; // {
    const out: Record<string, unknown> = {};
    this.ws();
    if (this.s[this.i] === "}") {
      this.i++;
      return out;
    }
    for (;;) {
      if (this.s[this.i] !== '"') this.fail("expected a string key");
      const key = this.string();
      this.ws();
      if (this.s[this.i] !== ":") this.fail("expected ':'");
      this.i++;
      this.ws();
      const v = this.value(depth);
      // Assigning "__proto__" would set the prototype; define it, so it stays an own key, as with JSON.parse.
      if (key === "__proto__") Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
      else out[key] = v;
      this.ws();
      const c = this.s[this.i++];
      if (c === "}") return out;
      if (c !== ",") {
        this.i--;
        this.fail("expected ',' or '}'");
      }
      this.ws();
    }
  }

  array(depth: number): unknown[] {
    if (depth > MAX_DEPTH) this.fail(`nested deeper than ${MAX_DEPTH} levels`);
    this.i++; // [
    const out: unknown[] = [];
    this.ws();
    if (this.s[this.i] === "]") {
      this.i++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth));
      this.ws();
      const c = this.s[this.i++];
      if (c === "]") return out;
      if (c !== ",") {
        this.i--;
        this.fail("expected ',' or ']'");
      }
      this.ws();
    }
  }

  string(): string {
    const s = this.s;
    this.i++; // opening quote
    let out = "";
    for (;;) {
      PLAIN_AT.lastIndex = this.i;
      const m = PLAIN_AT.exec(s);
      if (m !== null && m[0].length > 0) {
        out += m[0];
        this.i += m[0].length;
      }
      const c = s[this.i];
      if (c === '"') {
        this.i++;
        return out;
      }
      if (c === undefined) this.fail("unterminated string");
      if (c !== "\\") this.fail("a control character in a string");
      const e = s[this.i + 1];
      this.i += 2;
      switch (e) {
        case '"':
        case "\\":
        case "/":
          out += e;
          break;
        case "b":
          out += "\b";
          break;
        case "f":
          out += "\f";
          break;
        case "n":
          out += "\n";
          break;
        case "r":
          out += "\r";
          break;
        case "t":
          out += "\t";
          break;
        case "u": {
          const hex = s.slice(this.i, this.i + 4);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail("a bad \\u escape");
          out += String.fromCharCode(parseInt(hex, 16));
          this.i += 4;
          break;
        }
        default:
          this.i -= 2;
          this.fail("a bad escape");
      }
    }
  }
}

/**
 * JSON text of `value`, like `JSON.stringify` (compact; `undefined`
 * members left out, `undefined` in an array written `null`, `toJSON`
 * honoured) except that a `JsonNumber` is written as its text.
 */
export function stringifyJson(value: unknown): string {
  const text = write(value, "");
  if (text === undefined) throw new TypeError(`not a JSON value: ${typeof value}`);
  return text;
}

function write(value: unknown, key: string): string | undefined {
  if (value instanceof JsonNumber) return value.text;
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON(k: string): unknown }).toJSON(key);
    if (value instanceof JsonNumber) return value.text;
  }
  if (Array.isArray(value)) {
    return `[${value.map((v, i) => write(v, String(i)) ?? "null").join(",")}]`;
  }
  if (value !== null && typeof value === "object" && !(value instanceof Number || value instanceof String || value instanceof Boolean)) {
    const obj = value as Record<string, unknown>;
    const parts: string[] = [];
    for (const k of Object.keys(obj)) {
      const v = write(obj[k], k);
      if (v !== undefined) parts.push(`${JSON.stringify(k)}:${v}`);
    }
    return `{${parts.join(",")}}`;
  }
  return JSON.stringify(value);
}

/** A deep copy of a JSON value that keeps `JsonNumber`s (immutable, so shared) as they are. */
export function cloneJson<T>(value: T): T {
  if (value instanceof JsonNumber || value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map(cloneJson) as T;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (k === "__proto__") Object.defineProperty(out, k, { value: cloneJson(v), enumerable: true, writable: true, configurable: true });
    else out[k] = cloneJson(v);
  }
  return out as T;
}

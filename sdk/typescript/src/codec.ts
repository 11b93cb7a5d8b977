// Text in, frames out; frames in, text out (the counterpart of protocol/codec.py).
//
// decode() parses one WebSocket message and validates it against the JSON Schema generated from
// the master's frame definitions (./generated/schema.ts), so a frame this SDK accepts is one the
// Python decoder accepts too (as far as JSON Schema can say). It never throws: it returns
// { ok: false, error } for anything malformed. Frame content is data only: nothing is evaluated.
import type { Frame, KnownFrame } from "./frames.js";
import { ANY_FRAME_SCHEMA } from "./generated/schema.js";

type Schema = Record<string, unknown>;

export class ProtocolError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = "ProtocolError";
    this.code = code;
  }
}

const root = ANY_FRAME_SCHEMA as { $defs: Record<string, Schema>; anyOf: Array<{ $ref: string }> };
const defs: Record<string, Schema> = root.$defs;

/** type tag -> the $defs entry of that frame type. */
const BY_TYPE = new Map<string, Schema>();
for (const [name, def] of Object.entries(defs)) {
  if (name === "GenericFrame") continue;
  const props = def.properties as Record<string, Schema> | undefined;
  const tag = props?.type?.enum as unknown[] | undefined;
  if (tag !== undefined && tag.length === 1 && typeof tag[0] === "string") BY_TYPE.set(tag[0], def);
}

/** Every frame type this SDK knows. */
export const KNOWN_TYPES: ReadonlySet<string> = new Set(BY_TYPE.keys());

export function isKnown(frame: Frame): frame is KnownFrame {
  return KNOWN_TYPES.has(frame.type);
}

const patterns = new Map<string, RegExp>();
function regex(source: string): RegExp {
  let re = patterns.get(source);
  if (re === undefined) {
    re = new RegExp(source, "u");
    patterns.set(source, re);
  }
  return re;
}

function typeOk(value: unknown, type: string): boolean {
  switch (type) {
    case "object":
      return typeof value === "object" && value !== null && !Array.isArray(value);
    case "array":
      return Array.isArray(value);
    case "string":
      return typeof value === "string";
    case "integer":
      return typeof value === "number" && Number.isInteger(value);
    case "number":
      return typeof value === "number" && Number.isFinite(value);
    case "boolean":
      return typeof value === "boolean";
    case "null":
      return value === null;
    default:
      return true;
  }
}

/** The subset of JSON Schema 2020-12 the generated schemas use. Returns an error or null. */
function validate(value: unknown, schema: Schema, path: string, depth: number): string | null {
  if (depth > 64) return `${path}: nested too deeply`;
  const ref = schema.$ref;
  if (typeof ref === "string") {
    const target = defs[ref.replace("#/$defs/", "")];
    if (target === undefined) return `${path}: unknown schema reference ${ref}`;
    const err = validate(value, target, path, depth + 1);
    if (err !== null) return err;
  }
  const anyOf = schema.anyOf as Schema[] | undefined;
  if (anyOf !== undefined) {
    let first: string | null = null;
    for (const option of anyOf) {
      const err = validate(value, option, path, depth + 1);
      if (err === null) {
        first = null;
        break;
      }
      first ??= err;
    }
    if (first !== null) return first;
  }
  if (schema.not !== undefined && validate(value, schema.not as Schema, path, depth + 1) === null) {
    return `${path}: value not allowed`;
  }
  const type = schema.type;
  if (typeof type === "string" && !typeOk(value, type)) return `${path}: expected ${type}`;
  if (Array.isArray(type) && !type.some((t) => typeOk(value, String(t)))) {
    return `${path}: expected ${type.join(" or ")}`;
  }
  const en = schema.enum as unknown[] | undefined;
  if (en !== undefined && !en.some((e) => e === value)) {
    return `${path}: expected one of ${en.map((e) => JSON.stringify(e)).join(", ")}`;
  }
  if (typeof value === "string") {
    // Lengths count code points; UTF-16 length bounds them (n/2 ≤ code points ≤ n), so the
    // count is only taken when the bound cannot decide.
    const min = schema.minLength;
    if (typeof min === "number" && value.length < 2 * min && [...value].length < min) {
      return `${path}: shorter than ${min}`;
    }
    const max = schema.maxLength;
    if (typeof max === "number" && value.length > max && [...value].length > max) {
      return `${path}: longer than ${max}`;
    }
    if (typeof schema.pattern === "string" && !regex(schema.pattern).test(value)) {
      return `${path}: does not match ${schema.pattern}`;
    }
  }
  if (typeof value === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) return `${path}: below ${schema.minimum}`;
    if (typeof schema.maximum === "number" && value > schema.maximum) return `${path}: above ${schema.maximum}`;
    if (typeof schema.exclusiveMinimum === "number" && value <= schema.exclusiveMinimum) {
      return `${path}: not above ${schema.exclusiveMinimum}`;
    }
    if (typeof schema.exclusiveMaximum === "number" && value >= schema.exclusiveMaximum) {
      return `${path}: not below ${schema.exclusiveMaximum}`;
    }
  }
  if (Array.isArray(value) && schema.items !== undefined) {
    for (let i = 0; i < value.length; i++) {
      const err = validate(value[i], schema.items as Schema, `${path}[${i}]`, depth + 1);
      if (err !== null) return err;
    }
  }
  if (typeOk(value, "object")) {
    const obj = value as Record<string, unknown>;
    for (const key of (schema.required as string[] | undefined) ?? []) {
      if (!(key in obj)) return `${path}: missing required field \`${key}\``;
    }
    const props = schema.properties as Record<string, Schema> | undefined;
    if (props !== undefined) {
      for (const [key, sub] of Object.entries(props)) {
        if (key in obj) {
          const err = validate(obj[key], sub, path ? `${path}.${key}` : key, depth + 1);
          if (err !== null) return err;
        }
      }
    }
  }
  return null;
}

export type Decoded = { ok: true; frame: Frame } | { ok: false; error: ProtocolError };

/** Decode and validate one envelope. Never throws. */
export function decode(text: string | unknown): Decoded {
  let value: unknown = text;
  if (typeof text === "string") {
    try {
      value = JSON.parse(text);
    } catch (e) {
      return { ok: false, error: new ProtocolError("invalid_frame", `not a JSON object: ${String(e)}`) };
    }
  }
  return decodeObject(value);
}

/** Validate an already parsed envelope (e.g. one element of a history's frames). Never throws. */
export function decodeObject(value: unknown): Decoded {
  try {
    if (!typeOk(value, "object")) {
      return { ok: false, error: new ProtocolError("invalid_frame", "not a JSON object") };
    }
    const obj = value as Record<string, unknown>;
    const type = obj.type;
    if (typeof type !== "string") {
      return { ok: false, error: new ProtocolError("invalid_frame", "missing required field `type`") };
    }
    const schema = BY_TYPE.get(type) ?? defs.GenericFrame;
    if (schema === undefined) {
      return { ok: false, error: new ProtocolError("invalid_frame", "no schema") };
    }
    const err = validate(obj, schema, "", 0);
    if (err !== null) return { ok: false, error: new ProtocolError("invalid_frame", `${type}: ${err}`) };
    if (!BY_TYPE.has(type)) {
      const meta = obj.metadata as Record<string, unknown> | null | undefined;
      if (meta?.ignorable !== true) {
        return {
          ok: false,
          error: new ProtocolError("unknown_type", `unknown frame type ${JSON.stringify(type)}`),
        };
      }
    }
    return { ok: true, frame: obj as Frame };
  } catch (e) {
    return { ok: false, error: new ProtocolError("invalid_frame", `undecodable: ${String(e)}`) };
  }
}

export function encode(frame: Frame | object): string {
  return JSON.stringify(frame);
}

/** UTF-8 byte length of a string (the size a buffer counts). */
export function byteLength(text: string): number {
  return new TextEncoder().encode(text).length;
}

/** A UUID v4 (crypto.randomUUID where available: it needs a secure context in browsers). */
export function newMessageId(): string {
  const c = globalThis.crypto;
  if (typeof c.randomUUID === "function") return c.randomUUID();
  const b = c.getRandomValues(new Uint8Array(16));
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

export function now(): string {
  return new Date().toISOString();
}

export function isSynthetic(frame: { metadata?: { synthetic?: boolean } | null }): boolean {
  return frame.metadata?.synthetic === true;
}

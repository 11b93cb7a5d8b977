// A RAWP client for browsers and Node, for agents (role "client") and UIs (role "edge").
// The same contract as the Python library (protocol/client.py): notes §2, §3, §5, §7, §15.4–6,
// §16.3 (producer acks), §16.4 (agent.interaction.cancel); RAWP 1.0.2 §7.1.1 and §7.8.
//
//  * Handshake: connection.hello with the participant id and cursor once known, then
//    connection.welcome and, on a reattach, the master's backlog (a session.history, delivered
//    frame by frame marked `replayed`, or whole with `splitBacklog: false`).
//  * Reconnect with bounded exponential backoff and full jitter after anything but a refusal
//    (4400 4401 4403 4404 4409 4410 4426), a normal end (1000) or close(). Connection states
//    are visible (`status`, the "status" event). The view is finalized locally on a drop
//    (§7.8.1) and unfinalized by the next backlog (§7.8.3).
//  * Outgoing frames while disconnected go to a RING / DROP / NONE buffer; frames written to a
//    socket that died stay in flight. After the next welcome the ones the master has
//    (welcome.received) are dropped and the rest are sent as ONE session.history with the exact
//    buffer_status (a client; an edge resends them one by one).
//  * send() resolves when the master committed the frame (connection.ack, §16.3) and rejects
//    with the refusal (session.error with ref_message_id) — or, with `producerAcks: false`
//    for a master without §16.3, when the frame left on a live socket.
//  * A malformed frame from the master never throws out of the event loop: it is counted and
//    reported as an "error" event. Frame content is never evaluated or turned into HTML.
import { ProtocolError, byteLength, decode, encode, isKnown, newMessageId, now } from "./codec.js";
import { BoundedBuffer, bufferStatus, type BufferedItem } from "./buffers.js";
import type { Frame, KnownFrame, MasterAck, Policy, Role, SessionErrorFrame } from "./frames.js";
import type {
  BufferRequest,
  BufferStatus,
  CreateSpec,
  History,
  PreservedElements,
  ContextWindow,
  Welcome,
} from "./generated/frames.js";
import { memoryStore, type StateStore } from "./persistence.js";
import { allowedTypes } from "./state.js";
import { SessionView, type ViewSnapshot } from "./view.js";

export const PROTOCOL_VERSION = "1.0.2";
export const SUBPROTOCOL = "rawp.1";
export const DEFAULT_BUFFER: BufferRequest = { policy: "RING", capacity_bytes: 256 * 1024 };
const SNAPSHOT_FORMAT = 1;
const NORMAL_END = 1000;
const SENT_TIMES = 4096;

// --- errors --------------------------------------------------------------------------------

export class ClientError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ClientError";
  }
}
/** The client was closed (or its session ended); nothing more can be sent. */
export class ClientClosed extends ClientError {
  constructor(message = "this client is closed; nothing more can be sent") {
    super(message);
    this.name = "ClientClosed";
  }
}
/** The master could not be reached within `backoff.maxAttempts` attempts. */
export class ReconnectExhausted extends ClientError {
  constructor(message: string) {
    super(message);
    this.name = "ReconnectExhausted";
  }
}
/** The master refused the connection with a close code reconnecting cannot help (notes §14). */
export class HandshakeRefused extends ClientError {
  readonly code: number;
  readonly reason: string;
  constructor(code: number, reason: string) {
    super(`the master refused the connection: ${code} ${reason}`.trim());
    this.name = "HandshakeRefused";
    this.code = code;
    this.reason = reason;
  }
}
/**
 * The WebSocket handshake itself was refused (an HTTP 4xx such as a wrong path or an origin not
 * allowed, or a URL that cannot be opened): reconnecting cannot help. Browsers do not expose
 * the HTTP status of a failed handshake, so there it looks like a network failure.
 */
export class ConnectRefused extends ClientError {
  readonly status: number | null;
  constructor(message: string, status: number | null) {
    super(message);
    this.name = "ConnectRefused";
    this.status = status;
  }
}
/** The master refused a frame (session.error with its ref_message_id, notes §16.3). */
export class FrameRefused extends ClientError {
  readonly errorCode: string;
  readonly error: SessionErrorFrame;
  constructor(error: SessionErrorFrame) {
    super(`${error.payload.error_code}: ${error.payload.message}`);
    this.name = "FrameRefused";
    this.errorCode = error.payload.error_code;
    this.error = error;
  }
}
/** A frame made while disconnected that the outgoing buffer could not keep (RING/DROP/NONE). */
export class FrameLost extends ClientError {
  readonly policy: Policy;
  constructor(messageId: string, policy: Policy) {
    super(`frame ${messageId} was lost: the ${policy} outgoing buffer could not keep it`);
    this.name = "FrameLost";
    this.policy = policy;
  }
}

export const REFUSAL_CODES: ReadonlySet<number> = new Set([4400, 4401, 4403, 4404, 4409, 4410, 4426]);

// --- reconnect policy ----------------------------------------------------------------------

export interface BackoffOptions {
  initialMs?: number;
  maxMs?: number;
  multiplier?: number;
  /** null: retry forever. */
  maxAttempts?: number | null;
}

/** Exponential backoff with full jitter: attempt n waits uniform(0, min(max, initial·mult^n)). */
export class Backoff {
  readonly initialMs: number;
  readonly maxMs: number;
  readonly multiplier: number;
  readonly maxAttempts: number | null;
  constructor(options: BackoffOptions = {}) {
    this.initialMs = options.initialMs ?? 250;
    this.maxMs = options.maxMs ?? 10_000;
    this.multiplier = options.multiplier ?? 2;
    this.maxAttempts = options.maxAttempts ?? null;
    if (this.initialMs < 0 || this.maxMs < 0 || this.multiplier < 1) {
      throw new RangeError("backoff needs initialMs >= 0, maxMs >= 0 and multiplier >= 1");
    }
    if (this.maxAttempts !== null && this.maxAttempts < 1) throw new RangeError("maxAttempts must be >= 1");
  }
  ceiling(attempt: number): number {
    return Math.min(this.maxMs, this.initialMs * this.multiplier ** Math.min(attempt, 64));
  }
  delay(attempt: number, random: () => number = Math.random): number {
    return this.ceiling(attempt) * random();
  }
}

export type ConnectionStatus = "new" | "connecting" | "connected" | "reconnecting" | "closed";

// --- the WebSocket the client runs on -----------------------------------------------------

/** What the client needs of a WebSocket: the browser's, or `ws`'s in Node. */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

const CLOSED = Symbol("closed");
type CloseInfo = { code: number; reason: string };

/** One socket: messages queued for an awaiting reader, the close remembered. */
class Conn {
  readonly ws: WebSocketLike;
  private queue: string[] = [];
  private waiter: ((v: string | typeof CLOSED) => void) | null = null;
  closeInfo: CloseInfo | null = null;
  private opened: Promise<void>;
  onBinary: (() => void) | null = null;

  constructor(Ctor: WebSocketConstructor, url: string) {
    this.ws = new Ctor(url, [SUBPROTOCOL]);
    this.opened = new Promise<void>((resolve, reject) => {
      this.ws.onopen = () => resolve();
      this.ws.onerror = (event) => {
        if (this.closeInfo !== null || this.ws.readyState === 1) return;
        const text = String((event as { message?: unknown } | null)?.message ?? "");
        const status = /Unexpected server response: (4\d\d)/.exec(text); // `ws` in Node
        if (status !== null) {
          reject(new ConnectRefused(`${url} refused the WebSocket handshake: HTTP ${status[1]}`, Number(status[1])));
        } else reject(new ClientError(`cannot connect to ${url}`));
      };
      this.ws.onclose = (event) => {
        this.closeInfo = { code: event.code, reason: event.reason ?? "" };
        reject(new ClientError(`connection to ${url} closed (${event.code})`));
        const w = this.waiter;
        this.waiter = null;
        w?.(CLOSED);
      };
    });
    this.opened.catch(() => {});
    this.ws.onmessage = (event) => {
      const data = event.data;
      if (typeof data !== "string") {
        this.onBinary?.();
        return;
      }
      const w = this.waiter;
      if (w !== null) {
        this.waiter = null;
        w(data);
      } else this.queue.push(data);
    };
  }

  open(timeoutMs: number): Promise<void> {
    return withTimeout(this.opened, timeoutMs, "WebSocket open");
  }

  /** The next message, or CLOSED. */
  next(): Promise<string | typeof CLOSED> {
    const head = this.queue.shift();
    if (head !== undefined) return Promise.resolve(head);
    if (this.closeInfo !== null) return Promise.resolve(CLOSED);
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }

  get live(): boolean {
    return this.ws.readyState === 1 && this.closeInfo === null;
  }

  abort(): void {
    const raw = this.ws as unknown as { terminate?: () => void };
    if (typeof raw.terminate === "function") raw.terminate();
    else this.ws.close(4000, "aborted");
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new ClientError(`${what} timed out after ${ms} ms`)), ms);
    promise.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}


// --- options, events, deliveries ----------------------------------------------------------

export interface ClientOptions {
  /** ws[s]://HOST:PORT/v1/ws */
  url: string;
  sessionId: string;
  role: Role;
  /** API key or session token (travels in connection.hello, notes §11). */
  token: string;
  /** Client only: create the session if absent (true, a name, or a CreateSpec). */
  create?: boolean | string | CreateSpec;
  /** The reattach buffer asked of the master and the bound of the outgoing buffer. */
  buffer?: BufferRequest;
  /**
   * false: ask for no session.presence frames, live or in backlogs (a viewer that shows no
   * roster, docs/protocol.md §5 item 12); `view.presence` then says so. Default true.
   */
  presence?: boolean;
  /**
   * A client (agent) that steers: it takes user.message during its turn, so the master relays
   * them at once. Otherwise a message that finds the agent running waits up to 3 s and is then
   * refused `busy` (the edge's send rejects with FrameRefused, code "busy"; notes §17.3).
   */
  acceptsInputDuringTurn?: boolean;
  backoff?: BackoffOptions | Backoff;
  /** The WebSocket constructor (default: globalThis.WebSocket; in Node 20 pass `ws`). */
  WebSocket?: WebSocketConstructor;
  /** Where resume state persists (default: memory). See persistence.ts. */
  store?: StateStore;
  /** Key in the store (default `rawp:<sessionId>:<role>`). */
  storeKey?: string;
  /** The first connection asks for the whole log as its backlog. */
  fromStart?: boolean;
  participantId?: string;
  /** Cursor acks: after this many frames received, and after ackIntervalMs without one. */
  ackEvery?: number;
  ackIntervalMs?: number;
  openTimeoutMs?: number;
  /**
   * send() resolves on the master's connection.ack (notes §16.3). Default true: every master
   * with §16.3 acks. Set false only for an older master that never sends `connection.ack` with
   * `last_message_id` (its send() promises would stay pending): send() then resolves once the
   * frame left on a live socket.
   */
  producerAcks?: boolean;
  /** Deliver a backlog frame by frame, each marked replayed (default true). */
  splitBacklog?: boolean;
  /** Bytes of sent-but-unconfirmed frames kept for resending (default: buffer capacity). */
  inFlightBytes?: number;
  /** Incoming frames kept for a slow iterator before the oldest are dropped. */
  maxQueue?: number;
  random?: () => number;
}

/** One frame as the iterator and the "frame" event deliver it. */
export interface Delivery {
  frame: Frame;
  /** True for frames replayed from a reattach backlog (not live). */
  replayed: boolean;
}

/** What send() resolves with. */
export interface SendReceipt {
  frame: KnownFrame;
  /** The seq the master gave it, when the ack named this very frame. */
  seq: number | null;
  /** How it was confirmed: the master's ack, the welcome's `received`, or written (no acks). */
  via: "ack" | "welcome" | "written";
}

/** A revisit came due (notes §17.5): what the "wake" event hands its listeners. */
export interface WakeEvent {
  revisitId: string;
  /** The time asked for (RFC 3339, as the wake states it). */
  at: string;
  reason: string | null;
  /** The logged session.wake itself. */
  frame: KnownFrame;
  /** True when it arrived in the backlog of a (re)attach rather than live. */
  replayed: boolean;
}

export interface ClientEvents {
  frame: (delivery: Delivery) => void;
  /** Each session.wake (a revisit asked for with revisit() came due), live or in a backlog, once. */
  wake: (wake: WakeEvent) => void;
  status: (status: ConnectionStatus) => void;
  welcome: (welcome: Welcome) => void;
  backlog: (history: History) => void;
  error: (error: Error) => void;
  committed: (receipt: SendReceipt) => void;
  closed: (error: Error | null) => void;
}
type Listeners = { [K in keyof ClientEvents]: Set<ClientEvents[K]> };

interface Pending {
  id: string;
  frame: KnownFrame | null; // null: a history (internal, no promise)
  inner?: string[]; // a history's frames
  resolve?: (r: SendReceipt) => void;
  reject?: (e: Error) => void;
  written: boolean;
}

interface ClientSnapshot {
  format: number;
  session_id: string;
  role: Role;
  participant_id: string | null;
  epoch: string | null;
  attached_before: boolean;
  turn_index: number;
  last_sync: [string, string] | null;
  outgoing: { policy: Policy; capacity_bytes: number; frames: string[]; lost_frame_count: number; high_watermark: number };
  in_flight: string[];
  deferred: string[];
  view: ViewSnapshot;
  saved_at: string;
}

type End = { end: true; error: Error | null };

// --- the client ----------------------------------------------------------------------------

export class RawpClient implements AsyncIterable<Delivery> {
  readonly url: string;
  readonly sessionId: string;
  readonly role: Role;
  readonly token: string;
  readonly bufferRequest: BufferRequest;
  readonly backoff: Backoff;
  readonly producerAcks: boolean;
  participantId: string | null;
  generation = 0;
  epoch: string | null = null;
  welcome: Welcome | null = null;
  view: SessionView;
  /** Frames from the master that did not decode (each also an "error" event). */
  undecodableFrames = 0;
  /** Incoming frames dropped from a full queue (a too slow iterator). */
  droppedFrames = 0;

  private readonly opts: ClientOptions;
  private readonly WS: WebSocketConstructor | undefined;
  private readonly store: StateStore;
  private readonly storeKey: string;
  private readonly create: CreateSpec | null;
  private readonly random: () => number;
  private statusValue: ConnectionStatus = "new";
  private listeners: Listeners = {
    frame: new Set(), wake: new Set(), status: new Set(), welcome: new Set(), backlog: new Set(),
    error: new Set(), committed: new Set(), closed: new Set(),
  };
  private conn: Conn | null = null;
  private liveFlag = false;
  private closing = false;
  private ended = false;
  private deleted = false;
  private restored = false;
  private attachedBefore = false;
  private turnIndex = -1;
  private woken = new Set<string>(); // message ids of the wakes told: each is told once
  private lastSync: [string, string] | null = null;
  private maxFrameBytes: number | null = null;
  private outgoing: BoundedBuffer<KnownFrame>;
  private watermarkFloor = 0;
  private dropClosed = false;
  private inFlight: BoundedBuffer<KnownFrame>;
  private deferred: Array<BufferedItem<KnownFrame>> = [];
  private pendingStatus: BufferStatus | null = null;
  private sentTimes = new Map<string, string>();
  private pending: Pending[] = [];
  private incoming: Array<Delivery | End> = [];
  private incomingWaiters: Array<() => void> = [];
  private receivedSinceAck = 0;
  private acked = 0;
  private ackTimer: ReturnType<typeof setTimeout> | null = null;
  private runner: Promise<void> | null = null;
  private sendChain: Promise<unknown> = Promise.resolve();
  private wakeSleep: (() => void) | null = null;
  private connecting: Promise<Welcome> | null = null;

  constructor(options: ClientOptions) {
    if (options.role !== "client" && options.role !== "edge") throw new RangeError("role must be 'client' or 'edge'");
    if (options.create && options.role !== "client") throw new RangeError("only a client (agent) may create its session");
    this.opts = options;
    this.url = options.url;
    this.sessionId = options.sessionId;
    this.role = options.role;
    this.token = options.token;
    this.bufferRequest = options.buffer ?? DEFAULT_BUFFER;
    this.backoff = options.backoff instanceof Backoff ? options.backoff : new Backoff(options.backoff);
    this.producerAcks = options.producerAcks ?? true;
    this.participantId = options.participantId ?? null;
    this.WS = options.WebSocket ?? ((globalThis as Record<string, unknown>).WebSocket as WebSocketConstructor | undefined);
    this.store = options.store ?? memoryStore();
    this.storeKey = options.storeKey ?? `rawp:${options.sessionId}:${options.role}`;
    this.random = options.random ?? Math.random;
    const c = options.create;
    this.create = c === undefined || c === false ? null : c === true ? {} : typeof c === "string" ? { name: c } : c;
    this.view = new SessionView(options.sessionId);
    this.outgoing = new BoundedBuffer(this.bufferRequest.policy, this.bufferRequest.capacity_bytes);
    this.inFlight = new BoundedBuffer("RING", Math.max(options.inFlightBytes ?? this.bufferRequest.capacity_bytes, 0));
  }

  // --- what callers read ------------------------------------------------------------------

  get status(): ConnectionStatus {
    return this.statusValue;
  }
  /** True while frames leave on a live socket. */
  get connected(): boolean {
    return this.liveFlag;
  }
  /** The last seq received (resume.last_seq of the next hello). */
  get cursor(): number {
    return this.view.lastSeq;
  }
  /** Frames waiting in the outgoing buffer. */
  get buffered(): number {
    return this.outgoing.length;
  }
  /** Frames written to a socket and not yet confirmed by the master. */
  get inFlightCount(): number {
    return this.inFlight.length;
  }
  /** The §7.1.1 status the outgoing buffer would be sent with now. */
  bufferStatus(): BufferStatus {
    const s = this.outgoing.status();
    if (this.watermarkFloor > (s.buffer_high_watermark ?? 0)) s.buffer_high_watermark = this.watermarkFloor;
    return s;
  }

  on<K extends keyof ClientEvents>(event: K, listener: ClientEvents[K]): () => void {
    (this.listeners[event] as Set<ClientEvents[K]>).add(listener);
    return () => {
      (this.listeners[event] as Set<ClientEvents[K]>).delete(listener);
    };
  }

  private emit<K extends keyof ClientEvents>(event: K, ...args: Parameters<ClientEvents[K]>): void {
    for (const listener of this.listeners[event]) {
      try {
        (listener as (...a: Parameters<ClientEvents[K]>) => void)(...args);
      } catch (e) {
        // A listener's bug must not break the event loop; report it (once, not recursively).
        if (event !== "error") this.emit("error", e instanceof Error ? e : new Error(String(e)));
      }
    }
  }

  /** Resolves once the status is one of `statuses`. */
  waitStatus(...statuses: ConnectionStatus[]): Promise<void> {
    if (statuses.includes(this.statusValue)) return Promise.resolve();
    return new Promise((resolve) => {
      const off = this.on("status", (s) => {
        if (statuses.includes(s)) {
          off();
          resolve();
        }
      });
    });
  }

  private setStatus(status: ConnectionStatus): void {
    if (status === this.statusValue) return;
    this.statusValue = status;
    this.emit("status", status);
  }

  // --- lifecycle ---------------------------------------------------------------------------

  /** Connect (retrying per backoff), say hello, wait for the welcome. Rejects with a refusal. */
  connect(): Promise<Welcome> {
    if (this.closing) return Promise.reject(new ClientClosed("this client was closed"));
    if (this.runner !== null && this.welcome !== null) return Promise.resolve(this.welcome);
    if (this.connecting === null) {
      this.connecting = this.connectOnce().finally(() => {
        this.connecting = null;
      });
    }
    return this.connecting;
  }

  private async connectOnce(): Promise<Welcome> {
    if (this.WS === undefined) {
      throw new ClientError("no WebSocket constructor: pass options.WebSocket (in Node 20: the `ws` package)");
    }
    if (!this.restored) {
      this.restored = true;
      await this.restoreFromStore();
    }
    const conn = await this.establish(true);
    this.runner = this.run(conn);
    return this.welcome!;
  }

  /** Close normally (1000), persist, end the iteration; pending sends reject with ClientClosed. */
  async close(): Promise<void> {
    if (this.closing) {
      await this.runner;
      return;
    }
    this.closing = true;
    this.liveFlag = false;
    this.wakeSleep?.(); // a reconnect waiting out its backoff gives up now
    this.conn?.ws.close(1000, "client closed");
    await this.connecting?.catch(() => {});
    await this.runner?.catch(() => {});
    await this.save();
    this.finish(null);
  }

  /** Drop the connection as a network failure would (tests, chaos drills). */
  abortConnection(): void {
    this.conn?.abort();
  }

  private finish(error: Error | null): void {
    this.stopAckTimer();
    this.liveFlag = false;
    if (!this.ended) {
      this.ended = true;
      this.closing = true;
      for (const p of this.pending.splice(0)) p.reject?.(error ?? new ClientClosed());
      this.incoming.push({ end: true, error });
      this.wake();
      this.setStatus("closed");
      this.emit("closed", error);
    }
    this.setStatus("closed");
  }

  private async run(conn: Conn): Promise<void> {
    try {
      for (;;) {
        await this.pump(conn);
        this.liveFlag = false;
        this.conn = null;
        this.stopAckTimer();
        if (this.closing) return;
        const info = conn.closeInfo ?? { code: 1006, reason: "" };
        if (this.deleted || info.code === NORMAL_END) {
          await this.save();
          this.finish(null);
          return;
        }
        if (REFUSAL_CODES.has(info.code)) {
          await this.save();
          this.finish(new HandshakeRefused(info.code, info.reason));
          return;
        }
        this.view.connectionLost(); // §7.8.1
        await this.save();
        try {
          conn = await this.establish(false);
        } catch (e) {
          this.finish(this.closing ? null : e instanceof Error ? e : new Error(String(e)));
          return;
        }
      }
    } catch (e) {
      this.finish(this.closing ? null : e instanceof Error ? e : new Error(String(e)));
    }
  }

  private async establish(first: boolean): Promise<Conn> {
    let attempt = 0;
    for (;;) {
      if (this.closing) throw new ClientClosed("this client was closed");
      if (!first || attempt > 0) {
        this.setStatus("reconnecting");
        await this.sleep(this.backoff.delay(attempt, this.random));
        if (this.closing) throw new ClientClosed("this client was closed");
      }
      this.setStatus("connecting");
      try {
        return await this.open();
      } catch (e) {
        if (e instanceof HandshakeRefused || e instanceof ConnectRefused || e instanceof ClientClosed) {
          this.setStatus("closed");
          throw e;
        }
        attempt += 1;
        const limit = this.backoff.maxAttempts;
        if (limit !== null && attempt >= limit) {
          this.setStatus("closed");
          throw new ReconnectExhausted(`could not reach ${this.url} in ${attempt} attempt(s): ${String(e)}`);
        }
      }
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(timer);
        if (self.wakeSleep === done) self.wakeSleep = null;
        resolve();
      }
      this.wakeSleep = done;
    });
  }

  private async open(): Promise<Conn> {
    const timeout = this.opts.openTimeoutMs ?? 10_000;
    let conn: Conn;
    try {
      conn = new Conn(this.WS!, this.url);
    } catch (e) {
      throw new ConnectRefused(`cannot open ${this.url}: ${String(e)}`, null);
    }
    conn.onBinary = () => this.malformed(new ProtocolError("unsupported_data", "binary message from the master"));
    this.conn = conn;
    try {
      await conn.open(timeout);
      const sentResume = this.hello(conn);
      const welcome = await this.readWelcome(conn, timeout);
      this.onWelcome(welcome, sentResume);
      if (sentResume || welcome.payload.resumed) {
        const first = await withTimeout(conn.next(), timeout, "backlog");
        if (first === CLOSED) throw this.closedError(conn);
        this.handle(first);
      }
      await this.serialized(() => this.sendReattach(conn, welcome));
      this.liveFlag = true;
    } catch (e) {
      conn.abort();
      this.conn = null;
      throw e;
    }
    this.setStatus("connected");
    this.startAckTimer(conn);
    await this.save();
    return conn;
  }

  private closedError(conn: Conn): Error {
    const info = conn.closeInfo;
    if (info !== null && REFUSAL_CODES.has(info.code)) return new HandshakeRefused(info.code, info.reason);
    return new ClientError(`the connection closed during the handshake (${info?.code ?? "?"})`);
  }

  private envelope(): { message_id: string; session_id: string; timestamp: string } {
    return { message_id: newMessageId(), session_id: this.sessionId, timestamp: now() };
  }

  private hello(conn: Conn): boolean {
    let resume: { last_seq: number; last_message_id?: string } | null = null;
    if (this.attachedBefore) {
      resume = { last_seq: this.view.lastSeq };
      if (this.view.lastMessageId !== null) resume.last_message_id = this.view.lastMessageId;
    } else if (this.view.lastSeq > 0) {
      // The caller folded the log so far into `view` (e.g. read over HTTP): resume after it.
      resume = { last_seq: this.view.lastSeq };
      if (this.view.lastMessageId !== null) resume.last_message_id = this.view.lastMessageId;
    } else if (this.opts.fromStart) resume = { last_seq: 0 };
    const payload: Record<string, unknown> = {
      protocol_version: PROTOCOL_VERSION,
      role: this.role,
      token: this.token,
      buffer: this.bufferRequest,
      presence: this.opts.presence ?? true,
    };
    if (this.participantId !== null) payload.participant_id = this.participantId;
    if (resume !== null) payload.resume = resume;
    if (this.create !== null) payload.create = this.create;
    if (this.opts.acceptsInputDuringTurn && this.role === "client") payload.accepts_input_during_turn = true;
    conn.ws.send(encode({ type: "connection.hello", ...this.envelope(), payload }));
    return resume !== null;
  }

  private async readWelcome(conn: Conn, timeout: number): Promise<Welcome> {
    const message = await withTimeout(conn.next(), timeout, "connection.welcome");
    if (message === CLOSED) throw this.closedError(conn);
    const d = decode(message);
    if (!d.ok) throw d.error;
    if (d.frame.type !== "connection.welcome") {
      throw new ProtocolError("invalid_frame", `expected connection.welcome, got ${d.frame.type}`);
    }
    return d.frame as Welcome;
  }

  private onWelcome(welcome: Welcome, sentResume: boolean): void {
    const w = welcome.payload;
    this.welcome = welcome;
    this.participantId = w.participant_id;
    this.generation = w.generation;
    this.epoch = w.session.epoch;
    this.maxFrameBytes = w.max_frame_bytes;
    const head = w.session.head_seq;
    if (!sentResume) this.view.resetCursor(head);
    else if (head < this.view.lastSeq) this.view.resetCursor(head);
    this.acked = Math.min(this.acked, this.view.lastSeq);
    this.view.receive(welcome);
    this.emit("welcome", welcome);
    this.deliver({ frame: welcome, replayed: false });
  }

  // --- the reattach history (§7.1.1) -------------------------------------------------------

  private async sendReattach(conn: Conn, welcome: Welcome): Promise<void> {
    const received = welcome.payload.received?.last_message_id ?? null;
    const synced = this.syncedFrame(received, welcome);
    if (received) {
      this.discardCommitted(received);
      this.commitThrough(received, null, "welcome");
    }
    if (this.producerAcks) {
      // Written, not confirmed, and evicted from the in-flight window: it cannot be resent.
      const held = new Set(this.inFlight.items.map((i) => i.value.message_id));
      for (const p of [...this.pending]) if (p.written && p.frame !== null && !held.has(p.id)) this.lose(p.id);
      this.pending = this.pending.filter((p) => p.frame !== null); // old histories are settled
    }
    const resend = this.inFlight.items;
    let status = this.bufferStatus();
    const buffered = this.outgoing.drain();
    this.watermarkFloor = 0;
    this.dropClosed = false;
    if (this.pendingStatus !== null) status = mergeStatus(this.pendingStatus, status);
    for (const item of buffered) this.inFlight.push(item.data, item.size, item.value);
    const items = [...resend, ...buffered];
    if (this.role === "client") {
      if (this.attachedBefore || items.length > 0 || status.truncated) {
        const [history, sent] = this.buildHistory(items, status, synced);
        this.pendingStatus = history.payload.buffer_status;
        this.write(conn, encode(history));
        this.pendingStatus = null;
        const sentIds = new Set(sent.map((i) => i.value.message_id));
        for (const item of sent) this.rememberSent(item.value);
        // frames shed to fit the master's frame size are lost
        for (const item of items) if (!sentIds.has(item.value.message_id)) this.lose(item.value.message_id);
        this.trackHistory(history, sent.map((i) => i.value.message_id));
        this.view.fold(history, "client");
      }
      while (this.deferred.length > 0) {
        const item = this.deferred[0]!;
        this.write(conn, item.data);
        this.deferred.shift();
        this.rememberSent(item.value);
        this.markWritten(item.value.message_id);
        this.foldOwn(item.value);
      }
    } else {
      if (status.truncated) {
        const lost = status.lost_frame_count;
        this.view.noteLocal(
          `${lost ?? "some"} frame(s) sent while disconnected were lost (${status.policy_applied} buffer)`,
        );
      }
      for (const item of items) {
        this.write(conn, item.data);
        this.rememberSent(item.value);
        this.markWritten(item.value.message_id);
        this.foldOwn(item.value);
      }
    }
    this.attachedBefore = true;
  }

  private write(conn: Conn, data: string): void {
    if (!conn.live) throw new ClientError("the connection closed while sending");
    conn.ws.send(data);
  }

  private syncedFrame(received: string | null, welcome: Welcome): [string, string] {
    const created = welcome.payload.session.created_at;
    if (received) {
      for (const item of this.inFlight.items) {
        if (item.value.message_id === received) {
          this.lastSync = [received, item.value.timestamp];
          return this.lastSync;
        }
      }
      const t = this.sentTimes.get(received);
      if (t !== undefined) {
        this.lastSync = [received, t];
        return this.lastSync;
      }
      if (this.lastSync !== null && this.lastSync[0] === received) return this.lastSync;
      return [received, created];
    }
    return ["", created];
  }

  private buildHistory(
    items: Array<BufferedItem<KnownFrame>>,
    status: BufferStatus,
    synced: [string, string],
  ): [History, Array<BufferedItem<KnownFrame>>] {
    const build = (kept: Array<BufferedItem<KnownFrame>>, extraLost: number): History => {
      let s = status;
      if (extraLost > 0) {
        const lost = status.lost_frame_count;
        s = bufferStatus(
          status.policy_applied,
          lost === undefined || lost === null ? null : lost + extraLost,
          status.buffer_high_watermark ?? 0,
        );
      }
      return {
        type: "session.history",
        ...this.envelope(),
        payload: {
          frames: kept.map((i) => JSON.parse(i.data) as Record<string, unknown>),
          buffer_status: s,
          last_sync_timestamp: synced[1],
          last_message_id: synced[0],
        },
      };
    };
    const limit = this.maxFrameBytes;
    const history = build(items, 0);
    if (limit === null || byteLength(encode(history)) <= limit) return [history, items];
    const overhead = byteLength(encode(build([], 0))) + 64;
    const kept = [...items];
    let size = kept.reduce((n, i) => n + i.size + 1, 0);
    while (kept.length > 0 && overhead + size > limit) {
      const shed = status.policy_applied !== "DROP" ? kept.shift()! : kept.pop()!;
      size -= shed.size + 1;
    }
    return [build(kept, items.length - kept.length), kept];
  }

  // --- receiving ---------------------------------------------------------------------------

  private async pump(conn: Conn): Promise<void> {
    for (;;) {
      const message = await conn.next();
      if (message === CLOSED) return;
      this.handle(message);
      if (this.receivedSinceAck >= (this.opts.ackEvery ?? 64)) this.ack(conn);
    }
  }

  private malformed(error: Error): void {
    this.undecodableFrames += 1;
    this.emit("error", error);
  }

  /** One message from the master. Never throws: bad input becomes an "error" event. */
  private handle(message: string): void {
    const d = decode(message);
    if (!d.ok) {
      this.malformed(d.error);
      return;
    }
    const frame = d.frame;
    try {
      if (frame.type === "connection.ack" && isKnown(frame)) {
        this.onMasterAck(frame as MasterAck);
        return;
      }
      if (frame.seq !== undefined && frame.seq !== null) {
        if (frame.seq <= this.view.lastSeq) {
          // notes §17.5: a wake that came due while this client was away follows its welcome
          // even when the cursor is past it (a fresh attach starts at the head): folded and
          // delivered, the cursor stays
          if (frame.type === "session.wake" && !this.view.hasSeen(frame.message_id)) {
            this.view.fold(frame, "master");
            this.deliver({ frame, replayed: false });
            this.tellWake(frame, false);
          }
          return;
        }
        this.receivedSinceAck += 1;
      } else if (frame.type === "session.history") {
        this.receivedSinceAck += 1;
      }
      if (frame.type === "session.deleted") this.deleted = true;
      if (frame.type === "session.error" && (frame.seq === undefined || frame.seq === null)) {
        this.onRefusal(frame as SessionErrorFrame);
      }
      if (frame.type === "session.history" && (frame.seq === undefined || frame.seq === null)) {
        this.onBacklog(frame as History);
        return;
      }
      this.view.receive(frame);
      this.deliver({ frame, replayed: false });
      this.tellWake(frame, false);
    } catch (e) {
      this.malformed(e instanceof Error ? e : new Error(String(e)));
    }
  }

  private onBacklog(history: History): void {
    for (const raw of history.payload.frames) {
      if ((raw as { type?: unknown }).type === "session.deleted") this.deleted = true;
    }
    this.view.receive(history);
    this.emit("backlog", history);
    if (this.opts.splitBacklog === false) {
      this.deliver({ frame: history, replayed: false });
      this.tellWakes(history);
      return;
    }
    for (const raw of history.payload.frames) {
      const d = decode(raw);
      if (!d.ok) {
        this.malformed(d.error);
        continue;
      }
      this.deliver({ frame: d.frame, replayed: true });
    }
    this.tellWakes(history);
  }

  private tellWakes(history: History): void {
    for (const raw of history.payload.frames) {
      const d = decode(raw);
      if (d.ok) this.tellWake(d.frame, true);
    }
  }

  /** The "wake" event for a session.wake not told before (notes §17.5). */
  private tellWake(frame: Frame, replayed: boolean): void {
    if (frame.type !== "session.wake" || !isKnown(frame)) return;
    if (this.woken.has(frame.message_id)) return;
    this.woken.add(frame.message_id);
    const p = frame.payload as { revisit_id: string; at: string; reason?: string | null };
    this.emit("wake", { revisitId: p.revisit_id, at: p.at, reason: p.reason ?? null, frame, replayed });
  }

  private deliver(delivery: Delivery): void {
    this.emit("frame", delivery);
    this.incoming.push(delivery);
    const max = this.opts.maxQueue ?? 100_000;
    if (this.incoming.length > max) {
      const index = this.incoming.findIndex((i) => !("end" in i));
      if (index >= 0) {
        this.incoming.splice(index, 1);
        this.droppedFrames += 1;
      }
    }
    this.wake();
  }

  private wake(): void {
    for (const w of this.incomingWaiters.splice(0)) w();
  }

  /** The next delivery; null once the stream ended; rejects with what ended it abnormally. */
  async receive(): Promise<Delivery | null> {
    for (;;) {
      const head = this.incoming[0];
      if (head !== undefined) {
        if ("end" in head) {
          if (head.error !== null) throw head.error;
          return null;
        }
        this.incoming.shift();
        return head;
      }
      await new Promise<void>((resolve) => {
        this.incomingWaiters.push(resolve);
      });
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Delivery> {
    for (;;) {
      const d = await this.receive();
      if (d === null) return;
      yield d;
    }
  }

  private ack(conn: Conn): void {
    const cursor = this.view.lastSeq;
    this.receivedSinceAck = 0;
    if (cursor <= this.acked || !conn.live) return;
    try {
      conn.ws.send(encode({ type: "connection.ack", ...this.envelope(), payload: { last_seq: cursor } }));
      this.acked = cursor;
    } catch {
      // the reader notices the close
    }
  }

  private startAckTimer(conn: Conn): void {
    this.stopAckTimer();
    const interval = this.opts.ackIntervalMs ?? 1000;
    const tick = () => {
      this.ack(conn);
      if (this.conn === conn && conn.live) this.ackTimer = setTimeout(tick, interval);
    };
    this.ackTimer = setTimeout(tick, interval);
  }

  private stopAckTimer(): void {
    if (this.ackTimer !== null) clearTimeout(this.ackTimer);
    this.ackTimer = null;
  }

  // --- producer acks (§16.3) ---------------------------------------------------------------

  private onMasterAck(ack: MasterAck): void {
    const id = ack.payload.last_message_id;
    if (typeof id !== "string" || id === "") return;
    this.discardCommitted(id);
    this.commitThrough(id, ack.payload.last_seq, "ack");
  }

  /** Drop what the master has from the in-flight window (a history: every frame inside it). */
  private discardCommitted(id: string): void {
    const lastInner = this.pending.find((p) => p.id === id)?.inner?.at(-1);
    this.inFlight.discardThrough((f) => f.message_id === id || f.message_id === lastInner);
  }

  /**
   * Resolve every pending send written up to and including `id` (a participant's frames are
   * committed in the order they were written). Frames not written yet stay pending.
   */
  private commitThrough(id: string, seq: number | null, via: SendReceipt["via"]): void {
    const index = this.pending.findIndex((p) => p.id === id);
    if (index < 0) return;
    const prefix = this.pending.splice(0, index + 1);
    const keep = prefix.filter((p) => !p.written);
    this.pending.unshift(...keep);
    for (const p of prefix) {
      if (!p.written || p.frame === null) continue;
      const receipt: SendReceipt = { frame: p.frame, seq: p.id === id ? seq : null, via };
      p.resolve?.(receipt);
      this.emit("committed", receipt);
    }
  }

  private onRefusal(error: SessionErrorFrame): void {
    const ref = error.payload.ref_message_id;
    if (typeof ref !== "string") return;
    const index = this.pending.findIndex((p) => p.id === ref);
    if (index < 0) return;
    const [p] = this.pending.splice(index, 1);
    this.inFlight.remove((f) => f.message_id === ref);
    p!.reject?.(new FrameRefused(error));
  }

  private trackHistory(history: History, inner: string[]): void {
    if (!this.producerAcks) {
      for (const id of inner) this.markWritten(id);
      return;
    }
    // Inner frames keep their own pending entries (resolved by an ack naming the history).
    const innerSet = new Set(inner);
    const entry: Pending = { id: history.message_id, frame: null, inner, written: true };
    // place it after the last of its inner frames
    let last = -1;
    this.pending.forEach((p, i) => {
      if (innerSet.has(p.id)) {
        p.written = true;
        last = i;
      }
    });
    this.pending.splice(last + 1, 0, entry);
  }

  private markWritten(id: string): void {
    const p = this.pending.find((x) => x.id === id);
    if (p === undefined) return;
    p.written = true;
    if (!this.producerAcks) this.commitThrough(id, null, "written");
  }

  private lose(id: string): void {
    const index = this.pending.findIndex((p) => p.id === id);
    if (index < 0) return;
    const [p] = this.pending.splice(index, 1);
    p!.reject?.(new FrameLost(id, this.bufferRequest.policy));
  }

  // --- sending -----------------------------------------------------------------------------

  private serialized<T>(fn: () => T | Promise<T>): Promise<T> {
    const next = this.sendChain.then(fn, fn);
    this.sendChain = next.catch(() => {});
    return next;
  }

  private rememberSent(frame: KnownFrame): void {
    this.sentTimes.set(frame.message_id, frame.timestamp);
    if (this.sentTimes.size > SENT_TIMES) {
      const oldest = this.sentTimes.keys().next().value;
      if (oldest !== undefined) this.sentTimes.delete(oldest);
    }
  }

  private foldOwn(frame: KnownFrame): void {
    // A rename comes back with its seq (notes §15.9); a delete request is never logged.
    if (frame.type !== "session.renamed" && frame.type !== "session.deleted") this.view.fold(frame, this.role);
  }

  /**
   * Send `frame` now, or buffer it until the next reattach. Resolves when the master committed
   * it (or, without producer acks, when it left on a live socket); rejects with FrameRefused,
   * FrameLost, ClientClosed, or a ProtocolError for a frame this role may not send.
   */
  send<F extends KnownFrame>(frame: F): Promise<SendReceipt> {
    if (this.closing) return Promise.reject(new ClientClosed());
    const types = allowedTypes(this.role);
    if (!types.has(frame.type) || frame.type.startsWith("connection.")) {
      return Promise.reject(new ProtocolError("direction", `a ${this.role} may not send ${frame.type} (notes §4)`));
    }
    const data = encode(frame);
    const size = byteLength(data);
    if (this.maxFrameBytes !== null && size > this.maxFrameBytes) {
      return Promise.reject(
        new ProtocolError("invalid_frame", `${frame.type} is ${size} bytes; the master accepts ${this.maxFrameBytes}`),
      );
    }
    const promise = new Promise<SendReceipt>((resolve, reject) => {
      const entry: Pending = { id: frame.message_id, frame, resolve, reject, written: false };
      this.pending.push(entry);
      const conn = this.conn;
      if (this.liveFlag && conn !== null && conn.live) {
        try {
          conn.ws.send(data);
          this.inFlight.push(data, size, frame);
          this.rememberSent(frame);
          this.foldOwn(frame);
          this.markWritten(frame.message_id);
          return;
        } catch {
          // the reader notices; this frame waits in the buffer
        }
      }
      if (this.role === "client" && isRequest(frame)) {
        // a delete request or a fatal error acts only live (notes §9): after the history
        this.deferred.push({ data, size, value: frame });
      } else {
        this.pushOutgoing(data, size, frame);
      }
    });
    // A caller that fires and forgets must not crash Node on a rejection (unhandled): the
    // promise still rejects for whoever awaits it.
    promise.catch(() => {});
    return promise;
  }

  private pushOutgoing(data: string, size: number, frame: KnownFrame): void {
    if (this.dropClosed) {
      this.outgoing.addLost(1);
      this.lose(frame.message_id);
      return;
    }
    const before = new Set(this.outgoing.items.map((i) => i.value.message_id));
    const kept = this.outgoing.push(data, size, frame);
    if (!kept) this.lose(frame.message_id);
    const now = new Set(this.outgoing.items.map((i) => i.value.message_id));
    for (const id of before) if (!now.has(id)) this.lose(id); // RING evicted it
  }

  // --- typed helpers: client (agent) -------------------------------------------------------

  /** The frame a helper builds (not sent): for callers that want its message id first. */
  frame<T extends KnownFrame["type"]>(type: T, payload: Extract<KnownFrame, { type: T }>["payload"]): Extract<KnownFrame, { type: T }> {
    return { type, ...this.envelope(), payload } as unknown as Extract<KnownFrame, { type: T }>;
  }

  /** §7.5.1; the id (UUID v4) and index are chosen when not given. Resolves with the turn id too. */
  turnStart(options: { turnId?: string; turnIndex?: number; mode?: string } = {}): Promise<SendReceipt> & { turnId: string } {
    const index = options.turnIndex ?? Math.max(this.turnIndex, this.view.state.lastTurnIndex) + 1;
    this.turnIndex = Math.max(this.turnIndex, index);
    const turnId = options.turnId ?? newMessageId();
    const payload: { turn_id: string; turn_index: number; mode?: string } = { turn_id: turnId, turn_index: index };
    if (options.mode !== undefined) payload.mode = options.mode;
    const promise = this.send(this.frame("session.turn.start", payload)) as Promise<SendReceipt> & { turnId: string };
    promise.turnId = turnId;
    return promise;
  }

  turnEnd(
    turnId: string,
    stopReason: "end_turn" | "max_tokens" | "cancelled" | "error" | "tool_use" | "awaiting_input" = "end_turn",
    toolInvocationCount?: number,
  ): Promise<SendReceipt> {
    const payload: { turn_id: string; stop_reason: typeof stopReason; tool_invocation_count?: number } = {
      turn_id: turnId,
      stop_reason: stopReason,
    };
    if (toolInvocationCount !== undefined) payload.tool_invocation_count = toolInvocationCount;
    return this.send(this.frame("session.turn.end", payload));
  }

  /** §7.3.1 session.usage (send it right after turnEnd). */
  usage(u: {
    inputTokens: number;
    outputTokens: number;
    costUsed?: number;
    costLimit?: number;
    costUnit?: string;
    messagesUsed?: number;
    messagesLimit?: number;
    timeToReset?: string;
    turnId?: string;
    cacheReadTokens?: number;
    cacheWriteTokens?: number;
    thinkingTokens?: number;
    contextWindow?: ContextWindow;
  }): Promise<SendReceipt> {
    const tokens: Record<string, number> = { input_tokens: u.inputTokens, output_tokens: u.outputTokens };
    if (u.cacheReadTokens !== undefined) tokens.cache_read_tokens = u.cacheReadTokens;
    if (u.cacheWriteTokens !== undefined) tokens.cache_write_tokens = u.cacheWriteTokens;
    if (u.thinkingTokens !== undefined) tokens.thinking_tokens = u.thinkingTokens;
    const payload = {
      token_usage: tokens as { input_tokens: number; output_tokens: number },
      cost_usage: { limit: u.costLimit ?? -1, used: u.costUsed ?? 0, unit: u.costUnit ?? "USD" },
      message_usage: { limit: u.messagesLimit ?? -1, used: u.messagesUsed ?? 0, unit: "COUNT" },
      time_to_reset: u.timeToReset ?? "PT5H",
      ...(u.turnId !== undefined ? { turn_id: u.turnId } : {}),
      ...(u.contextWindow !== undefined ? { context_window: u.contextWindow } : {}),
    };
    return this.send(this.frame("session.usage", payload));
  }

  textDelta(blockId: string, delta: string): Promise<SendReceipt> {
    return this.send(this.frame("agent.text.delta", { block_id: blockId, delta }));
  }
  textDone(blockId: string, text?: string): Promise<SendReceipt> {
    return this.send(this.frame("agent.text.done", text === undefined ? { block_id: blockId } : { block_id: blockId, text }));
  }
  thinkingDelta(blockId: string, delta: string): Promise<SendReceipt> {
    return this.send(this.frame("agent.thinking.delta", { block_id: blockId, delta }));
  }
  thinkingDone(blockId: string): Promise<SendReceipt> {
    return this.send(this.frame("agent.thinking.done", { block_id: blockId }));
  }
  toolRequest(callId: string, toolName: string, input: Record<string, unknown>): Promise<SendReceipt> {
    return this.send(this.frame("tool.invoke.request", { call_id: callId, tool_name: toolName, input }));
  }
  toolResult(callId: string, status: "ok" | "error" | "cancelled" = "ok", output?: unknown): Promise<SendReceipt> {
    const payload = output === undefined ? { call_id: callId, status } : { call_id: callId, status, output };
    return this.send(this.frame("tool.invoke.result", payload));
  }
  interactionRequest(
    interactionId: string,
    kind: "confirmation" | "choice" | "input",
    prompt: string,
    options?: unknown[],
  ): Promise<SendReceipt> {
    const payload = { interaction_id: interactionId, kind, prompt, ...(options !== undefined ? { options } : {}) };
    return this.send(this.frame("agent.interaction.request", payload));
  }
  /** notes §16.4: withdraw a pending question (the agent timed out or moved on). */
  interactionCancel(interactionId: string, reason?: string): Promise<SendReceipt> {
    const payload = reason === undefined ? { interaction_id: interactionId } : { interaction_id: interactionId, reason };
    return this.send(this.frame("agent.interaction.cancel", payload));
  }
  agentState(state: "idle" | "thinking" | "tool_calling" | "responding" | "awaiting_input"): Promise<SendReceipt> {
    return this.send(this.frame("agent.state", { state }));
  }
  compacted(
    summary: string,
    previousTokenCount: number,
    currentTokenCount: number,
    trigger: "auto" | "manual" | "requested" = "auto",
    preservedElements?: PreservedElements,
  ): Promise<SendReceipt> {
    const payload = {
      summary,
      previous_token_count: previousTokenCount,
      current_token_count: currentTokenCount,
      trigger,
      ...(preservedElements !== undefined ? { preserved_elements: preservedElements } : {}),
    };
    return this.send(this.frame("session.compacted", payload));
  }

  /**
   * Ask to be woken at `at` (notes §17.5): session.revisit.request. Resolves with its revisit id
   * (a new UUID unless `opts.revisitId` names one: the same id again reschedules it) once the
   * master stored it; rejects with FrameRefused (`invalid_revisit`: more than 60 s past or 366
   * days ahead; `too_many_revisits`: 100 pending) or a RangeError for a time without a zone.
   * When it comes due the "wake" event fires (at once if attached, else after the next attach).
   */
  async revisit(at: Date | string, reason?: string, opts: { revisitId?: string } = {}): Promise<string> {
    const when = revisitTime(at);
    const revisitId = opts.revisitId ?? newMessageId();
    const payload = reason === undefined ? { revisit_id: revisitId, at: when } : { revisit_id: revisitId, at: when, reason };
    await this.send(this.frame("session.revisit.request", payload));
    return revisitId;
  }
  /** Withdraw a pending revisit (session.revisit.cancel); an unknown or woken id changes nothing. */
  async cancelRevisit(revisitId: string): Promise<void> {
    await this.send(this.frame("session.revisit.cancel", { revisit_id: revisitId }));
  }

  // --- typed helpers: both roles -----------------------------------------------------------

  rename(name: string): Promise<SendReceipt> {
    const payload = {
      session_id: this.sessionId,
      name,
      renamed_by: this.role,
      ...(this.view.name ? { previous_name: this.view.name } : {}),
    };
    return this.send(this.frame("session.renamed", payload));
  }
  /** §7.7.1: asks the master to end the session (notes §9). */
  delete(reason: "user_request" | "master_request" | "timeout" | "error" = "user_request"): Promise<SendReceipt> {
    return this.send(this.frame("session.deleted", { session_id: this.sessionId, reason, deleted_by: this.role }));
  }
  error(errorCode: string, message: string, fatal = false): Promise<SendReceipt> {
    return this.send(this.frame("session.error", { error_code: errorCode, message, fatal }));
  }

  // --- typed helpers: edge -----------------------------------------------------------------

  userMessage(text: string): Promise<SendReceipt> {
    return this.send(this.frame("user.message", { text }));
  }
  interactionResponse(interactionId: string, response: unknown): Promise<SendReceipt> {
    return this.send(this.frame("control.interaction.response", { interaction_id: interactionId, response }));
  }
  cancel(turnId?: string): Promise<SendReceipt> {
    return this.send(this.frame("control.cancel", turnId === undefined ? {} : { turn_id: turnId }));
  }

  // --- persistence -------------------------------------------------------------------------

  /** This client's resume state (what save() writes). */
  snapshot(): ClientSnapshot {
    return {
      format: SNAPSHOT_FORMAT,
      session_id: this.sessionId,
      role: this.role,
      participant_id: this.participantId,
      epoch: this.epoch,
      attached_before: this.attachedBefore,
      turn_index: this.turnIndex,
      last_sync: this.lastSync,
      outgoing: {
        policy: this.outgoing.policy,
        capacity_bytes: this.outgoing.capacityBytes,
        frames: this.outgoing.items.map((i) => i.data),
        lost_frame_count: this.outgoing.lostFrameCount ?? 0,
        high_watermark: Math.max(this.outgoing.highWatermark, this.watermarkFloor),
      },
      in_flight: this.inFlight.items.map((i) => i.data),
      deferred: this.deferred.map((i) => i.data),
      view: this.view.snapshot(),
      saved_at: now(),
    };
  }

  /** Persist the resume state to the store. */
  async save(): Promise<void> {
    try {
      await this.store.set(this.storeKey, JSON.stringify(this.snapshot()));
    } catch (e) {
      this.emit("error", e instanceof Error ? e : new Error(String(e)));
    }
  }

  /** Forget the persisted state (e.g. after the session ended for good). */
  async forget(): Promise<void> {
    await this.store.remove(this.storeKey);
  }

  private async restoreFromStore(): Promise<void> {
    let text: string | null | undefined;
    try {
      text = await this.store.get(this.storeKey);
    } catch (e) {
      this.emit("error", e instanceof Error ? e : new Error(String(e)));
      return;
    }
    if (text === null || text === undefined) return;
    let s: ClientSnapshot;
    try {
      s = JSON.parse(text) as ClientSnapshot;
    } catch {
      this.emit("error", new ClientError(`unreadable saved state under ${this.storeKey}; starting fresh`));
      return;
    }
    if (s.format > SNAPSHOT_FORMAT) throw new ClientError(`saved state is from a newer client (format ${s.format})`);
    if (s.session_id !== this.sessionId || s.role !== this.role) {
      throw new ClientError(`${this.storeKey} holds ${s.role} state for ${s.session_id}`);
    }
    this.participantId = s.participant_id;
    this.epoch = s.epoch;
    this.attachedBefore = s.attached_before;
    this.turnIndex = s.turn_index;
    this.lastSync = s.last_sync;
    this.outgoing = new BoundedBuffer(s.outgoing.policy, s.outgoing.capacity_bytes);
    const load = (data: string): BufferedItem<KnownFrame> | null => {
      const d = decode(data);
      return d.ok && isKnown(d.frame) ? { data, size: byteLength(data), value: d.frame } : null;
    };
    for (const data of s.outgoing.frames) {
      const item = load(data);
      if (item !== null) this.outgoing.push(item.data, item.size, item.value);
    }
    this.outgoing.addLost(s.outgoing.lost_frame_count);
    this.watermarkFloor = s.outgoing.high_watermark;
    this.dropClosed = s.outgoing.policy === "DROP" && s.outgoing.lost_frame_count > 0;
    for (const data of s.in_flight) {
      const item = load(data);
      if (item !== null) this.inFlight.push(item.data, item.size, item.value);
    }
    for (const data of s.deferred) {
      const item = load(data);
      if (item !== null) this.deferred.push(item);
    }
    // §7.8.2: restoring persisted state when the connection no longer exists finalizes.
    this.view = SessionView.restore(s.view, true);
  }
}

function isRequest(frame: KnownFrame): boolean {
  if (frame.type === "session.deleted") return true;
  return frame.type === "session.error" && frame.payload.fatal === true;
}

function mergeStatus(earlier: BufferStatus, later: BufferStatus): BufferStatus {
  const a = earlier.lost_frame_count;
  const b = later.lost_frame_count;
  const lost = a === undefined || a === null || b === undefined || b === null ? null : a + b;
  return bufferStatus(
    later.policy_applied,
    lost,
    Math.max(earlier.buffer_high_watermark ?? 0, later.buffer_high_watermark ?? 0),
    earlier.truncated || later.truncated,
  );
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** A revisit's `at` on the wire: a Date as UTC, or RFC 3339 text with its zone. */
function revisitTime(at: Date | string): string {
  if (at instanceof Date) {
    if (Number.isNaN(at.getTime())) throw new RangeError("revisit: an invalid Date");
    return at.toISOString();
  }
  if (!RFC3339.test(at) || Number.isNaN(new Date(at).getTime())) {
    throw new RangeError(`revisit: not an RFC 3339 time with a zone: ${JSON.stringify(at)} (e.g. 2026-12-08T09:00:00Z)`);
  }
  return at;
}

// @rawp/client: the RAWP 1.0.2 client for browsers and Node (docs/client-typescript.md).
export {
  RawpClient,
  Backoff,
  ClientError,
  ClientClosed,
  ReconnectExhausted,
  HandshakeRefused,
  ConnectRefused,
  FrameRefused,
  FrameLost,
  REFUSAL_CODES,
  DEFAULT_BUFFER,
  PROTOCOL_VERSION,
  SUBPROTOCOL,
} from "./client.js";
export type {
  BackoffOptions,
  ClientEvents,
  ClientOptions,
  ConnectionStatus,
  Delivery,
  SendReceipt,
  WakeEvent,
  WebSocketConstructor,
  WebSocketLike,
} from "./client.js";
export { endingNotice, humanizeMs, windowText } from "./endings.js";
export { continueSession } from "./continue.js";
export type { ContinuedSession, ContinueOptions } from "./continue.js";
export { memoryStore, webStore, sessionStore, localStore } from "./persistence.js";
export type { StateStore, WebStorageLike } from "./persistence.js";
export { SessionView, LOCAL_SENDER, dataIncomplete, revisitText, wakeText, wakeTime } from "./view.js";
export type {
  Block,
  CompactionBlock,
  InteractionBlock,
  Notice,
  NoticeBlock,
  TextBlock,
  ThinkingBlock,
  ToolCallBlock,
  Totals,
  TurnBlock,
  UsageBlock,
  UserMessageBlock,
  ViewSnapshot,
} from "./view.js";
export { ProtocolError, decode, decodeObject, encode, isKnown, KNOWN_TYPES, newMessageId } from "./codec.js";
export type { Decoded } from "./codec.js";
export { BoundedBuffer, bufferStatus, selectBacklog, POLICIES } from "./buffers.js";
export type { BufferedItem } from "./buffers.js";
export {
  SessionState,
  MAX_PENDING_REVISITS,
  allowedTypes,
  check as checkFrame,
  fold as foldFrame,
  snapshot as snapshotState,
  status as sessionStatus,
} from "./state.js";
export type { Phase, PendingRevisit, Status } from "./state.js";
export { finalize, planHistory, foldEntry, unfinalizes, needsFinalization, CONNECTION_LOST } from "./finalize.js";
export type * from "./frames.js";

// The frame types, generated from schemas/ (./generated/frames.ts; npm run gen-types).
import type * as G from "./generated/frames.js";

export type * from "./generated/frames.js";

export type SenderRole = "client" | "edge" | "master";
export type Role = "client" | "edge";
export type Policy = "RING" | "DROP" | "NONE";

/** session.error as received (a refusal names the refused frame in `ref_message_id`, notes §16.3). */
export type SessionErrorFrame = G.SessionError;

/** Every known frame. */
export type KnownFrame =
  | G.Hello
  | G.Welcome
  | G.Ack
  | G.Presence
  | G.History
  | G.TurnStart
  | G.TurnEnd
  | G.Usage
  | G.Compacted
  | G.Renamed
  | G.Deleted
  | SessionErrorFrame
  | G.AgentState
  | G.TextDelta
  | G.TextDone
  | G.ThinkingDelta
  | G.ThinkingDone
  | G.ToolRequest
  | G.ToolResult
  | G.InteractionRequest
  | G.InteractionResponse
  | G.UserMessage
  | G.Cancel
  | G.InteractionCancel
  | G.RevisitRequest
  | G.RevisitCancel
  | G.Wake;

/** An envelope of an unknown type marked `metadata.ignorable` (relayed untouched, notes §3). */
export interface GenericFrame {
  type: string;
  message_id: string;
  session_id: string;
  timestamp: string;
  seq?: number | null;
  sender?: G.Sender | null;
  metadata?: G.Metadata | null;
  payload?: unknown;
  [k: string]: unknown;
}

export type Frame = KnownFrame | GenericFrame;
export type FrameOf<T extends KnownFrame["type"]> = Extract<KnownFrame, { type: T }>;

/** The master's connection.ack (notes §16.3) as received: `last_seq` and `last_message_id`. */
export type MasterAck = G.Ack;

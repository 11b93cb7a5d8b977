// HAND-DECLARED frame types that the master on this branch does not have in schemas/ yet
// (notes §16.3 producer acks, §16.4 withdrawing a question). Being added to the master and the
// schemas on another branch; once merged, regenerate (npm run gen-types) and replace these
// declarations by the generated ones. Keep every such type in THIS file only.
import type { Metadata, Sender } from "./generated/frames.js";

/** notes §16.3: `connection.ack` master → participant: what the master committed of ours. */
export interface MasterAckPayload {
  /** Cumulative: the seq of the last frame of ours the master committed. */
  last_seq: number;
  /** The `message_id` of that frame. */
  last_message_id?: string | null;
  [k: string]: unknown | undefined;
}

/** notes §16.3: a refused frame's `session.error` names it. */
export interface RefusalFields {
  /** The `message_id` of the frame the master refused. */
  ref_message_id?: string | null;
}

/** notes §16.4: `agent.interaction.cancel` (client → master) ends a pending interaction. */
export interface InteractionCancelPayload {
  interaction_id: string;
  reason?: string | null;
  [k: string]: unknown | undefined;
}

export interface InteractionCancel {
  type: "agent.interaction.cancel";
  message_id: string;
  session_id: string;
  timestamp: string;
  seq?: number | null;
  sender?: Sender | null;
  metadata?: Metadata | null;
  payload: InteractionCancelPayload;
  [k: string]: unknown | undefined;
}

/**
 * Schema fragments for the decoder, in the shape of schemas/any-frame.json's $defs, used only
 * while the generated schema lacks them (the generated definition wins once it exists).
 */
export const PENDING_DEFS: Record<string, unknown> = {
  InteractionCancel: {
    type: "object",
    required: ["type", "payload", "message_id", "session_id", "timestamp"],
    properties: {
      type: { enum: ["agent.interaction.cancel"] },
      message_id: { type: "string", minLength: 1, maxLength: 256 },
      session_id: { type: "string", minLength: 1, maxLength: 256 },
      timestamp: { type: "string" },
      payload: {
        type: "object",
        required: ["interaction_id"],
        properties: {
          interaction_id: { type: "string", minLength: 1, maxLength: 256 },
          reason: { anyOf: [{ type: "string" }, { type: "null" }] },
        },
      },
    },
  },
};

/** Extra optional payload keys the pending types add to generated definitions. */
export const PENDING_PAYLOAD_KEYS: Record<string, Record<string, unknown>> = {
  AckPayload: { last_message_id: { anyOf: [{ type: "string" }, { type: "null" }] } },
  SessionErrorPayload: { ref_message_id: { anyOf: [{ type: "string" }, { type: "null" }] } },
};

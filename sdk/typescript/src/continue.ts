// Carrying an ended session on (notes §17.2): POST /v1/sessions/{id}/continue. The one HTTP
// call of the client: every other part speaks RAWP over the WebSocket.
import { ClientError } from "./client.js";

export interface ContinueOptions {
  /** The API key (a session token cannot make sessions). */
  apiKey: string;
  /** Name the new session's id: asking again returns the same session (created false). */
  sessionId?: string;
  name?: string;
  /** fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

export interface ContinuedSession {
  sessionId: string;
  parentSessionId: string;
  seedLength: number;
  created: boolean;
  /** A session token for the new session (first creation only). */
  token: string | null;
  session: Record<string, unknown>;
}

/**
 * A new live session whose parent is the ended `sessionId`, holding its whole log; attach to
 * it (from the start) to read the history and go on. Rejects with ClientError naming the
 * master's problem (`not_ended` for a live session, `not_found`, ...).
 */
export async function continueSession(httpUrl: string, sessionId: string, options: ContinueOptions): Promise<ContinuedSession> {
  const body: Record<string, string> = {};
  if (options.sessionId !== undefined) body.session_id = options.sessionId;
  if (options.name !== undefined) body.name = options.name;
  const doFetch = options.fetch ?? fetch;
  // One path segment whatever the id holds (the master's router decodes it back). An id of
  // dots only ("..", valid in the grammar) is a dot segment to every WHATWG URL, %2E-encoded
  // or not: it would reach another route, so it is refused here, clearly.
  if (/^\.+$/.test(sessionId) && sessionId.length <= 2) {
    throw new ClientError(`continue ${sessionId}: a session id of dots only cannot travel in a URL path; continue it with the Python client (protocol.client.continue_session)`);
  }
  const url = `${httpUrl.replace(/\/+$/, "")}/v1/sessions/${encodeURIComponent(sessionId)}/continue`;
  const answer = await doFetch(url, {
    method: "POST",
    headers: { Authorization: `Bearer ${options.apiKey}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  let data: unknown = null;
  try {
    data = await answer.json();
  } catch {
    data = null;
  }
  const obj = (data ?? {}) as Record<string, unknown>;
  if ((answer.status !== 200 && answer.status !== 201) || typeof obj.session !== "object" || obj.session === null) {
    throw new ClientError(`continue ${sessionId} refused (${answer.status} ${String(obj.code ?? "")}): ${String(obj.detail ?? "")}`);
  }
  const session = obj.session as Record<string, unknown>;
  const token = obj.token as { token?: string } | null | undefined;
  return {
    sessionId: String(session.session_id),
    parentSessionId: String(session.parent_session_id),
    seedLength: Number(session.seed_length),
    created: Boolean(obj.created),
    token: token && typeof token.token === "string" ? token.token : null,
    session,
  };
}

// The master's HTTP API from the page: bearer credential, JSON in and out, problem+json errors.
import type { Frame } from "@rawp/client";

export class ApiError extends Error {
  readonly status: number;
  readonly code: string | null;
  constructor(status: number, problem: { detail?: string; code?: string } | null) {
    super(problem && problem.detail ? problem.detail : `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code ?? null;
  }
}

export interface Participant {
  participant_id: string;
  role: string;
  state: string;
}
export interface SessionInfo {
  session_id: string;
  name: string;
  workspace: string;
  parent_session_id: string | null;
  seed_length: number;
  created_at: string;
  head_seq: number;
  status: string;
  connection: "attached" | "detached" | "none";
  agent_state: string;
  participants: Participant[];
  ended_at?: string | null;
  reason?: string | null;
  deleted_by?: string | null;
  stop_reason?: string | null;
  last_error?: { code: string; message: string } | null;
  usage?: { input_tokens: number; output_tokens: number; cost_used: number; cost_unit: string };
}
export interface WhoAmI {
  kind: "key" | "token";
  workspace: string;
  session_id: string | null;
  grants: string[];
  /** What the credential may do (read, write, delete, tokens, admin); absent from older masters. */
  scopes?: string[];
}

export class Api {
  constructor(readonly token: string) {}

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? null : JSON.stringify(body),
    });
    const type = response.headers.get("Content-Type") || "";
    const data: unknown = type.includes("json") ? await response.json() : await response.text();
    if (!response.ok) {
      throw new ApiError(response.status, typeof data === "object" && data !== null ? (data as { detail?: string }) : null);
    }
    return data as T;
  }

  whoami(): Promise<WhoAmI> {
    return this.request("GET", "/v1/whoami");
  }
  async sessions(): Promise<SessionInfo[]> {
    const page = await this.request<{ sessions: SessionInfo[] }>("GET", "/v1/sessions?limit=200");
    return page.sessions;
  }
  session(id: string): Promise<SessionInfo> {
    return this.request("GET", `/v1/sessions/${encodeURIComponent(id)}`);
  }
  rename(id: string, name: string): Promise<unknown> {
    return this.request("PATCH", `/v1/sessions/${encodeURIComponent(id)}`, { name });
  }
  /** A new live session carrying an ended one on (notes §17.2). */
  continueSession(id: string): Promise<{ session: SessionInfo; created: boolean }> {
    return this.request("POST", `/v1/sessions/${encodeURIComponent(id)}/continue`, {});
  }
  remove(id: string): Promise<unknown> {
    return this.request("DELETE", `/v1/session/${encodeURIComponent(id)}`);
  }

  /** Every logged event after `afterSeq`, oldest first, a page (≤ 1000) at a time. */
  async *events(id: string, afterSeq = 0): AsyncGenerator<Frame[]> {
    let after = afterSeq;
    for (;;) {
      const page = await this.request<{ events: Frame[]; next: { after_seq: number } | null }>(
        "GET",
        `/v1/sessions/${encodeURIComponent(id)}/events?order=asc&limit=1000&after_seq=${after}`,
      );
      yield page.events;
      if (!page.next) return;
      after = page.next.after_seq;
    }
  }
}

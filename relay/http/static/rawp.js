// The dashboard as a RAWP edge: one WebSocket per open session, reattached by itself.
//
// attach(): hello {role: "edge", token, participant_id (after the first welcome),
// resume {last_seq: view.lastSeq}} → welcome → the master's backlog (a session.history
// without seq) → live frames. When the socket drops, the view finalizes locally (§7.8.1)
// and the connection comes back with the same participant_id and its last seq; the backlog
// then unfinalizes (§7.8.3). Nothing is folded twice: the view ignores seqs it already has.

import { uuid4 } from "./view.js";

export const PROTOCOL_VERSION = "1.0.2";
export const SUBPROTOCOL = "rawp.1";

// Close codes after which reattaching cannot help (notes §14).
const FINAL_CODES = new Map([
  [4401, "the credential was refused (unknown, expired or revoked)"],
  [4403, "this credential may not attach to the session"],
  [4404, "no such session"],
  [4409, "another connection took over"],
  [4410, "the session was deleted"],
  [4426, "protocol version not supported"],
]);

export function envelope(sessionId, type, payload) {
  return {
    type, payload, session_id: sessionId, message_id: uuid4(),
    timestamp: new Date().toISOString(),
  };
}

export class EdgeConnection {
  // onChange(): the view changed; onStatus(state, detail): "connecting" | "live" |
  // "reconnecting" | "ended".
  constructor({ wsUrl, token, view, onChange, onStatus }) {
    this.wsUrl = wsUrl;
    this.token = token;
    this.view = view;
    this.onChange = onChange || (() => {});
    this.onStatus = onStatus || (() => {});
    this.participantId = null;
    this.ws = null;
    this.stopped = false;
    this.retries = 0;
    this.timer = null;
    this.attaches = 0;
  }

  get sessionId() { return this.view.sessionId; }

  attach() {
    if (this.stopped) return;
    this.onStatus(this.attaches ? "reconnecting" : "connecting");
    const ws = new WebSocket(this.wsUrl, [SUBPROTOCOL]);
    this.ws = ws;
    ws.onopen = () => {
      const hello = { protocol_version: PROTOCOL_VERSION, role: "edge", token: this.token,
                      resume: { last_seq: this.view.lastSeq } };
      if (this.participantId) hello.participant_id = this.participantId;
      ws.send(JSON.stringify(envelope(this.sessionId, "connection.hello", hello)));
    };
    ws.onmessage = (event) => {
      if (ws !== this.ws) return;
      const frame = JSON.parse(event.data);
      if (frame.type === "connection.welcome") {
        this.participantId = frame.payload.participant_id;
        this.retries = 0;
        this.attaches += 1;
        this.onStatus("live", frame.payload.resumed ? "resumed" : "attached");
      }
      this.view.receive(frame);
      this.onChange();
    };
    ws.onclose = (event) => {
      if (ws !== this.ws) return;
      this.ws = null;
      if (this.stopped) return;
      if (this.view.terminated) { this.stop("the session was deleted"); return; }
      if (FINAL_CODES.has(event.code)) { this.stop(FINAL_CODES.get(event.code), event.code); return; }
      if (this.view.connectionLost().length) this.onChange();
      const delay = Math.min(5000, 200 * 2 ** this.retries);
      this.retries += 1;
      this.onStatus("reconnecting", `connection lost (${event.code}); retrying`);
      this.timer = setTimeout(() => this.attach(), delay);
    };
  }

  // Send a frame as this edge. The master does not echo a sender's frames back (except
  // session.renamed), so the view folds it now, as protocol/view.py does.
  send(type, payload, { fold = true } = {}) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return null;
    const frame = envelope(this.sessionId, type, payload);
    this.ws.send(JSON.stringify(frame));
    if (fold) {
      this.view.fold({ ...frame, sender: { role: "edge", participant_id: this.participantId } }, "edge");
      this.onChange();
    }
    return frame;
  }

  stop(reason = "closed", code = 1000) {
    this.stopped = true;
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = null;
    if (ws && ws.readyState <= WebSocket.OPEN) ws.close(1000, "bye");
    this.onStatus("ended", reason, code);
  }
}

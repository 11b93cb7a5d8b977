// The master's HTTP API from the page: bearer credential, JSON in and out, problem+json errors.

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? problem.detail : `HTTP ${status}`);
    this.status = status;
    this.code = problem && problem.code;
  }
}

export class Api {
  constructor(token) { this.token = token; }

  async request(method, path, body) {
    const headers = { Authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const type = response.headers.get("Content-Type") || "";
    const data = type.includes("json") ? await response.json() : await response.text();
    if (!response.ok) throw new ApiError(response.status, typeof data === "object" ? data : null);
    return data;
  }

  whoami() { return this.request("GET", "/v1/whoami"); }
  sessions() { return this.request("GET", "/v1/sessions?limit=200"); }
  session(id) { return this.request("GET", `/v1/sessions/${encodeURIComponent(id)}`); }
  rename(id, name) { return this.request("PATCH", `/v1/sessions/${encodeURIComponent(id)}`, { name }); }
  remove(id) { return this.request("DELETE", `/v1/session/${encodeURIComponent(id)}`); }

  // Every logged event after `afterSeq`, oldest first, following the pages.
  async *events(id, afterSeq = 0) {
    let after = afterSeq;
    for (;;) {
      const page = await this.request(
        "GET", `/v1/sessions/${encodeURIComponent(id)}/events?order=asc&limit=1000&after_seq=${after}`);
      yield* page.events;
      if (!page.next) return;
      after = page.next.after_seq;
    }
  }
}

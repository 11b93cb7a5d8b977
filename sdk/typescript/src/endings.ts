// How every view names the end of a session (notes §17.1): an expiry is "ended", never
// "deleted" — its log is kept and it can be continued. Mirrors protocol/endings.py.

const UNITS: Array<[string, number]> = [["day", 86_400_000], ["hour", 3_600_000], ["minute", 60_000], ["second", 1000]];

/** 604800000 → "7 days"; 90000 → "90 seconds": the largest whole unit. */
export function humanizeMs(ms: number): string {
  for (const [name, size] of UNITS) {
    if (ms >= size && ms % size === 0) {
      const count = ms / size;
      return `${count} ${name}${count === 1 ? "" : "s"}`;
    }
  }
  const seconds = ms / 1000;
  return `${seconds} second${seconds === 1 ? "" : "s"}`;
}

/** Why a session ended by expiry: "the agent did not come back within 7 days". */
export function windowText(windowMs: number | null | undefined): string {
  if (windowMs == null || windowMs < 0) return "the agent did not come back in time";
  return `the agent did not come back within ${humanizeMs(windowMs)}`;
}

/** The notice kind and text of a session.deleted payload. */
export function endingNotice(
  reason: string,
  deletedBy: string,
  windowMs?: number | null,
): ["ended" | "deleted", string] {
  if (reason === "timeout") return ["ended", windowText(windowMs)];
  if (reason === "error") return ["ended", `a fatal error (reported by ${deletedBy})`];
  return ["deleted", `session deleted (${reason}, by ${deletedBy})`];
}

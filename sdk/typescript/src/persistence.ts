// Pluggable persistence for a client's resume state (cursor, participant id, view, unsent and
// in-flight frames): memory, the browser's sessionStorage / localStorage, or anything with the
// same three methods (IndexedDB, a file, …). Values are JSON strings.

export interface StateStore {
  get(key: string): string | null | undefined | Promise<string | null | undefined>;
  set(key: string, value: string): void | Promise<void>;
  remove(key: string): void | Promise<void>;
}

/** The Web Storage interface (sessionStorage, localStorage). */
export interface WebStorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

/** Keeps state in this process only (the default): survives reconnects, not a reload. */
export function memoryStore(): StateStore & { readonly data: Map<string, string> } {
  const data = new Map<string, string>();
  return {
    data,
    get: (key) => data.get(key) ?? null,
    set: (key, value) => {
      data.set(key, value);
    },
    remove: (key) => {
      data.delete(key);
    },
  };
}

/** Wraps a Web Storage object; a full storage (QuotaExceededError) is not fatal. */
export function webStore(storage: WebStorageLike): StateStore {
  return {
    get: (key) => storage.getItem(key),
    set: (key, value) => {
      try {
        storage.setItem(key, value);
      } catch {
        // quota exceeded or storage disabled: resume falls back to what the master keeps
      }
    },
    remove: (key) => storage.removeItem(key),
  };
}

function globalStorage(name: "sessionStorage" | "localStorage"): WebStorageLike {
  const storage = (globalThis as Record<string, unknown>)[name] as WebStorageLike | undefined;
  if (storage === undefined) throw new Error(`${name} is not available here (a browser provides it)`);
  return storage;
}

/** Per browser tab: survives a reload, not closing the tab. */
export function sessionStore(): StateStore {
  return webStore(globalStorage("sessionStorage"));
}

/** Per origin: survives closing the browser. */
export function localStore(): StateStore {
  return webStore(globalStorage("localStorage"));
}

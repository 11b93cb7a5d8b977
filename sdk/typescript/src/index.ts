export * from "./codec.js";
export * from "./buffers.js";
export * from "./state.js";
export * from "./finalize.js";
export * from "./view.js";
export type * from "./frames.js";
export * from "./client.js";
export * from "./persistence.js";

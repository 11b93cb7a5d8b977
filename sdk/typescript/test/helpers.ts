// Shared test helpers: paths, a real `rawp serve` child process on free 127.0.0.1 ports.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url)); // dist/test
export const packageDir = resolve(here, "..", "..");
export const repoDir = resolve(packageDir, "..", "..");
export const corpusDir = join(packageDir, "test", "corpus");

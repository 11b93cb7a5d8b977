// Bundles the dashboard (src/) with esbuild into relay/http/static/dashboard.{js,css}.
// `node build.mjs` writes them; `node build.mjs --check` fails when the checked-in files
// differ from a fresh build (the bundle is stale). The build is deterministic: no
// timestamps, no source maps, no absolute paths in the output.
import * as esbuild from "esbuild";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "..", "relay", "http", "static");
const check = process.argv.includes("--check");

const result = await esbuild.build({
  entryPoints: { dashboard: join(here, "src", "main.ts"), "dashboard-style": join(here, "src", "style.css") },
  bundle: true,
  format: "esm",
  target: ["es2022", "chrome110", "firefox110", "safari16"],
  minify: true,
  legalComments: "none",
  charset: "utf8",
  sourcemap: false,
  write: false,
  outdir: out,
  absWorkingDir: here,
  alias: { "@rawp/client": join(here, "..", "typescript", "src", "index.ts") },
  logLevel: "warning",
});

let stale = 0;
for (const file of result.outputFiles) {
  const name = relative(join(here, "..", ".."), file.path);
  if (check) {
    let current = null;
    try { current = readFileSync(file.path); } catch { current = null; }
    if (current === null || Buffer.compare(current, Buffer.from(file.contents)) !== 0) {
      console.error(`stale: ${name} differs from a fresh build (run: make dashboard)`);
      stale += 1;
    }
  } else {
    writeFileSync(file.path, file.contents);
    console.log(`wrote ${name} (${file.contents.length} bytes)`);
  }
}
if (stale > 0) process.exit(1);
if (check) console.log("dashboard bundle up to date");

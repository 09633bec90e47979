// Runs the npm package `toolpick` (pontusab/toolpick) on a catalogue + query list for the
// side-by-side benchmark. Driven by tests/bench/peers/toolpick.py, which copies this file next
// to a node_modules holding toolpick and its peer deps (`ai`, `zod`) and runs it there.
//
//   node toolpick_runner.mjs INPUT.json
//
// INPUT: {"tools": [{"name", "description", "parameters"}], "queries": [str], "k": int, "warmup": int}
// stdout: one JSON object
//   {"version", "node", "build_ms", "rankings": [[names...]], "latencies_ms": [float]}
//
// How the tools are given to toolpick: the way an AI-SDK user does, an object keyed by tool name
// whose values are `tool({description, inputSchema: jsonSchema(parameters)})`. toolpick indexes
// `description + " " + parameter names`; for a `jsonSchema()` wrapper it reads the names from
// `inputSchema.jsonSchema.properties`, so the parameter names are indexed as for real users.
//
// Strategy: "hybrid" (toolpick's keyword engine: BM25 0.2 + TF-IDF cosine 0.8, name repeated 3x);
// no embedding model, no reranker, so no API key and no network.
//
// Which call is timed: `index.select(query, {maxTools: k, adaptive: false})`.
// toolpick's search engine (`engine.search(query, k)`) is not exported; `select` is the lowest
// public call that returns a ranked list of up to k names for a free-text query with a caller
// chosen k. With no rerankerModel it fetches exactly k (not 3k), with no `threshold` nothing is
// filtered, `adaptive: false` switches off its elbow cut, and with no alwaysActive / relatedTools
// the final merge/expand steps are the identity, so the result is exactly the engine's top-k
// order. (`searchTool().execute` is fixed at 5 results and the middleware/prepareStep paths need
// a chat prompt.) The hybrid engine only returns tools with a positive score, so a ranking can
// hold fewer than k names when few tools share a term with the query.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createToolIndex } from "toolpick";
import { tool, jsonSchema } from "ai";

const require = createRequire(import.meta.url);

function toolpickVersion() {
  // toolpick's "exports" map hides package.json, so read it from its resolved folder.
  const { dirname, join } = require("node:path");
  const { fileURLToPath } = require("node:url");
  const entry = fileURLToPath(import.meta.resolve("toolpick"));
  let dir = dirname(entry);
  for (let i = 0; i < 5; i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
      if (pkg.name === "toolpick") return pkg.version;
    } catch {}
    dir = dirname(dir);
  }
  return "unknown";
}

const ms = (t0, t1) => Number(t1 - t0) / 1e6;

async function main() {
  const path = process.argv[2];
  if (!path) throw new Error("usage: node toolpick_runner.mjs INPUT.json");
  const input = JSON.parse(readFileSync(path, "utf8"));
  const k = Number(input.k ?? 5);
  const queries = input.queries ?? [];
  const warmup = Number(input.warmup ?? 0);

  // The user's tool objects exist before indexing, so building them is not timed.
  const tools = {};
  for (const t of input.tools) {
    const params =
      t.parameters && typeof t.parameters === "object" ? t.parameters : { type: "object", properties: {} };
    tools[t.name] = tool({ description: t.description ?? "", inputSchema: jsonSchema(params) });
  }

  const b0 = process.hrtime.bigint();
  const index = createToolIndex(tools, { strategy: "hybrid" });
  await index.warmUp(); // no-op for hybrid (no embeddings, no enrichment), kept for fidelity
  const b1 = process.hrtime.bigint();

  const opts = { maxTools: k, adaptive: false };
  for (let i = 0; i < warmup && queries.length > 0; i++) {
    await index.select(queries[i % queries.length], opts);
  }

  const rankings = [];
  const latencies = [];
  for (const q of queries) {
    const t0 = process.hrtime.bigint();
    const names = await index.select(q, opts);
    const t1 = process.hrtime.bigint();
    rankings.push(names);
    latencies.push(ms(t0, t1));
  }

  process.stdout.write(
    JSON.stringify({
      version: toolpickVersion(),
      node: process.version,
      build_ms: ms(b0, b1),
      rankings,
      latencies_ms: latencies,
      peak_rss_mb: process.resourceUsage().maxRSS / 1024,
    }) + "\n",
  );
}

main().catch((err) => {
  process.stderr.write(`toolpick_runner: ${err && err.message ? err.message : String(err)}\n`);
  process.exit(1);
});

// Ask a running `toolroute serve` which tools an agent should see, and follow its events.
//
//   node dist/main.js [http://127.0.0.1:8765]      (the token, if any, in $TOOLROUTE_TOKEN)
//
// Prints what each call answered, then one JSON summary line.

import { type EngineEvent, ToolrouteClient, ToolrouteError } from "./client.js";

const url = process.argv[2] ?? "http://127.0.0.1:8765";
const client = new ToolrouteClient(url, process.env["TOOLROUTE_TOKEN"]);

const ready = await client.ready();
console.log(`ready: ${ready.ready} (${ready.tools} tools)`);

// Subscribe first, so the selection below is seen as an event.
const stop = new AbortController();
let opened: () => void = () => {};
const open = new Promise<void>((resolve) => (opened = resolve));
const firstSelection = (async (): Promise<EngineEvent> => {
  for await (const { event } of client.events(stop.signal, opened)) {
    if (event.type === "selection.finished") return event;
  }
  throw new Error("the event stream ended before a selection.finished event");
})();
await open;

const selection = await client.select({ query: "what is the weather in Oslo tomorrow", max_tools: 3 });
console.log(`select: ${selection.tool_ids.join(", ")} [${selection.outcome}]`);

const step = await client.prepareStep({
  messages: [{ role: "user", content: "send an email to Ana about the launch" }],
  session: "typescript-example",
});
console.log(`prepare-step: ${step.tool_ids === null ? "every tool" : step.tool_ids.join(", ")}`);

const found = await client.searchTools({
  arguments: { query: "run a SQL query on the database" },
  session: "typescript-example",
  k: 2,
});
console.log(`search-tools: ${found.tools.map((tool) => tool.name).join(", ")}`);

const routing = await client.route({ query: "list the open issues" });
console.log(`route: kept ${routing.selected.length} servers [${routing.outcome}: ${routing.reason}]`);

// A mistake is an error that names the field.
let refused: ToolrouteError | undefined;
try {
  await client.select({ query: "weather", max_tools: 0 });
} catch (error) {
  if (!(error instanceof ToolrouteError)) throw error;
  refused = error;
  console.log(`refused: ${error.field}: ${error.message}`);
}

const event = await firstSelection;
stop.abort();
console.log(`event: ${event.type} with ${(event["tool_ids"] as string[]).length} tools`);

console.log(
  JSON.stringify({
    selected: selection.tool_ids,
    step: step.tool_ids,
    found: found.tools.map((tool) => tool.name),
    routing: routing.outcome,
    refused: refused && { status: refused.status, type: refused.type, field: refused.field },
    event: event.type,
  }),
);

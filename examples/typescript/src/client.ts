// A small typed client for `toolroute serve` (the shapes are those of its /openapi.json).
// Node 20's own fetch; no dependencies.

export type Outcome = "applied" | "degraded" | "failed_open" | "skipped";

/** A message in any shape the service reads (OpenAI, Anthropic, Gemini …). */
export type Message = Record<string, unknown>;

export interface Selection {
  tool_ids: string[];
  scores: (number | null)[];
  sources: string[];
  strategy: string;
  outcome: Outcome;
  reason: string;
  latency_ms: number;
  active_sets: string[];
  explanations: Record<string, unknown>[];
}

export interface Routing {
  selected: string[];
  excluded: string[];
  excluded_tools: string[];
  strategy: string;
  outcome: Outcome;
  reason: string;
  latency_ms: number;
  answered: number;
  cache_hit: boolean;
  model: string | null;
}

export interface StepSelection {
  /** `null` means: show every tool. */
  tool_ids: string[] | null;
  query: string;
  page: number;
  outcome: Outcome;
  reason: string;
  latency_ms: number;
  active_sets: string[];
  system_prompts: string[];
  routing: Routing | null;
  explanations: Record<string, unknown>[];
}

export interface SearchResult {
  tools: { name: string; description: string; relevance: number }[];
  hint: string;
}

export type Question =
  | { type: "boolean"; instructions: string; true?: unknown; false?: unknown }
  | { type: "choice"; instructions: string; options: Record<string, unknown> }
  | { type: "score"; instructions: string; levels: unknown[] };

export interface Decision {
  /** `null`: no judgement could be made (no provider, a failure, the deadline); carry on. */
  result: {
    model: string;
    provider: string;
    answers: Record<string, { type: string; [key: string]: unknown }>;
    usage: { input_tokens: number; output_tokens: number };
    latency_ms: number;
  } | null;
}

export interface Ready {
  ready: boolean;
  reason: string;
  tools: number;
  embeddings: boolean;
  degraded_reason: string;
}

interface Access {
  allow?: string[];
  deny?: string[];
}

export interface SelectRequest extends Access {
  query: string;
  strategy?: "keyword" | "semantic" | "combined";
  max_tools?: number;
  threshold?: number | null;
  adaptive?: boolean;
  always_active?: string[];
  explain?: boolean | string[];
}

export interface StepRequest extends Access {
  messages: string | Message[];
  session?: string;
  force_sets?: string[];
  release_sets?: string[];
  explain?: boolean | string[];
}

export interface SearchRequest extends Access {
  arguments: { query: string } | string;
  session?: string;
  k?: number;
}

/** An event as the engine wrote it: `type` is its tag (`selection.finished` …). */
export interface EngineEvent {
  type: string;
  [field: string]: unknown;
}

/** What the service refused, and why: `field` names the body field (or header) at fault. */
export class ToolrouteError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly field: string | null,
  ) {
    super(`${status} ${type}: ${message}`);
    this.name = "ToolrouteError";
  }
}

export class ToolrouteClient {
  private readonly base: string;

  constructor(
    baseUrl: string,
    private readonly token?: string,
  ) {
    this.base = baseUrl.replace(/\/+$/, "");
  }

  select(request: SelectRequest): Promise<Selection> {
    return this.post("/v1/select", request);
  }

  prepareStep(request: StepRequest): Promise<StepSelection> {
    return this.post("/v1/prepare-step", request);
  }

  route(request: { query: string | Message[]; session?: string }): Promise<Routing> {
    return this.post("/v1/route", request);
  }

  decide(request: {
    state: unknown;
    questions: Record<string, Question>;
    model?: string;
    deadline_s?: number;
  }): Promise<Decision> {
    return this.post("/v1/decide", request);
  }

  searchTools(request: SearchRequest): Promise<SearchResult> {
    return this.post("/v1/search-tools", request);
  }

  update(request: {
    add?: Record<string, unknown>[];
    remove?: string[];
    replace?: Record<string, unknown>[];
  }): Promise<{ tools: number; served: number }> {
    return this.post("/v1/update", request);
  }

  /** Record that these tools served this request (the service has `/v1/learn` when its
   * engine can learn; otherwise this is a 404 `not_found`). */
  learn(request: { request: string; tool_ids: string[] }): Promise<{ learned: number }> {
    return this.post("/v1/learn", request);
  }

  async ready(): Promise<Ready> {
    // 503 while warming up, shutting down or at the connection limit is an answer here.
    const reply = await fetch(`${this.base}/ready`);
    return (await reply.json()) as Ready;
  }

  /**
   * The engine's events as they happen, until `signal` aborts or the service stops.
   * `dropped` says how many this stream lost since the last one (it fell behind).
   * `onOpen` is called once the subscription is in place: every event after it arrives.
   */
  async *events(
    signal: AbortSignal,
    onOpen?: () => void,
  ): AsyncGenerator<{ event: EngineEvent; dropped: number }> {
    const reply = await fetch(`${this.base}/v1/events`, { headers: this.headers(), signal });
    if (!reply.ok || reply.body === null) {
      throw await errorOf(reply);
    }
    const decoder = new TextDecoder();
    let pending = "";
    let dropped = 0;
    try {
      for await (const bytes of reply.body) {
        pending += decoder.decode(bytes as Uint8Array, { stream: true });
        let end: number;
        while ((end = pending.indexOf("\n\n")) >= 0) {
          const text = pending.slice(0, end);
          pending = pending.slice(end + 2);
          if (text.startsWith(": subscribed")) onOpen?.();
          const frame = parseFrame(text);
          if (frame.event === "dropped") {
            dropped += (JSON.parse(frame.data) as { dropped: number }).dropped;
          } else if (frame.data) {
            yield { event: JSON.parse(frame.data) as EngineEvent, dropped };
            dropped = 0;
          }
        }
      }
    } catch (error) {
      if (!signal.aborted) throw error;
    }
  }

  private headers(json = false): Record<string, string> {
    const headers: Record<string, string> = {};
    if (json) headers["content-type"] = "application/json";
    if (this.token) headers["authorization"] = `Bearer ${this.token}`;
    return headers;
  }

  private async post<T>(path: string, body: object): Promise<T> {
    const reply = await fetch(`${this.base}${path}`, {
      method: "POST",
      headers: this.headers(true),
      body: JSON.stringify(body),
    });
    if (!reply.ok) {
      throw await errorOf(reply);
    }
    return (await reply.json()) as T;
  }
}

async function errorOf(reply: Response): Promise<ToolrouteError> {
  const text = await reply.text();
  try {
    const { error } = JSON.parse(text) as {
      error: { type: string; message: string; field: string | null };
    };
    return new ToolrouteError(reply.status, error.type, error.message, error.field);
  } catch {
    return new ToolrouteError(reply.status, "http", text.slice(0, 200), null);
  }
}

function parseFrame(text: string): { event: string; data: string } {
  let event = "message";
  const data: string[] = [];
  for (const line of text.split("\n")) {
    if (line.startsWith(":")) continue; // a comment: subscribed, keep-alive
    const colon = line.indexOf(":");
    const key = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (key === "event") event = value;
    else if (key === "data") data.push(value);
  }
  return { event, data: data.join("\n") };
}

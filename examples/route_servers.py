"""Drop the MCP servers a request plainly does not need, with a decision model.

python examples/route_servers.py "open an issue about the login crash"

Uses the decision provider the environment configures (TYPESAFE_API_KEY, PERPLEXITY_API_KEY,
... — see docs/decisions-and-routing.md#providers for every provider's variables), or an OpenAI-compatible chat model with logprobs when
TOOLROUTE_DECISION_PROVIDER=logprob, TOOLROUTE_LOGPROB_BASE_URL and TOOLROUTE_LOGPROB_MODEL
are set (a local vLLM or Ollama, say). With none, routing fails open: every server is kept.
"""

from __future__ import annotations

import sys

import trio

from toolroute import Server, route_servers
from toolroute.providers import default_decider

SERVERS = [
    Server("github", "Read and change GitHub repositories, issues and pull requests.", ()),
    Server("slack", "Read and post messages in Slack channels.", ()),
    Server("weather", "Current weather and forecasts for a place.", ()),
    Server("maps", "Directions, distances and places nearby.", ()),
    Server("calendar", "Read and create calendar events.", ()),
]


async def main(query: str) -> None:
    decider = default_decider()
    routing = await route_servers(query, SERVERS, decider=decider)
    print(f"provider: {decider.name if decider else 'none configured'}")
    print(f"outcome:  {routing.outcome} {routing.reason}".rstrip())
    print(f"kept:     {', '.join(routing.selected)}")
    print(f"dropped:  {', '.join(routing.excluded) or '-'}")
    if decider is not None:
        await decider.aclose()


if __name__ == "__main__":
    trio.run(main, " ".join(sys.argv[1:]) or "open an issue about the login crash")

"""A denied tool is never shown, never found and never activated, under every fault.

Each example runs its own ``trio.run`` under a ``MockClock`` (virtual time) with CPU work
inline, so a hung model is a long virtual sleep and deadlines are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute import Catalog, ConfigError, EngineConfig, ToolAccess, ToolIndex, ToolSet
from toolroute._core.config import Deadlines, RerankConfig, SelectionDefaults, WarmupConfig
from toolroute._core.errors import DecisionError
from toolroute._core.routing.config import RoutingConfig
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder
from toolroute.testing import ScriptedDecider, ScriptedGenerator

EMBED_S = 0.05
WORDS = ["weather", "email", "issue", "calendar", "file", "song", "flight", "invoice"]
EMBEDDER_FAULTS = ("ok", "raise", "hang", "nan", "wrong_count")
RERANK_FAULTS = ("off", "ok", "garbage", "names_denied", "raise", "hang")


class FaultyEmbedder:
    """A working embedder that misbehaves by schedule, one fault per call."""

    def __init__(self, schedule: Sequence[str]) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.identity, self.dim, self.max_batch = "faulty", 64, 8
        self.schedule = list(schedule) or ["ok"]
        self.calls = 0
        self.hang = False

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        fault = self.schedule[self.calls % len(self.schedule)]
        self.calls += 1
        self.hang = fault == "hang"
        vectors = self.inner.embed(texts)
        if fault == "raise":
            raise RuntimeError("injected")
        if fault == "nan":
            return np.full_like(vectors, np.nan)
        if fault == "wrong_count":
            return vectors[:-1] if len(vectors) else np.zeros((1, 64), np.float32)
        return vectors


def virtual_cpu(embedder: FaultyEmbedder) -> Callable[..., Any]:
    async def run_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        async with limiter:
            result = fn(*args)
            if embedder.hang:
                await trio.sleep(3600)
            return result

    return run_cpu


def generator_for(fault: str, catalog: Catalog, denied: Sequence[str]) -> ScriptedGenerator | None:
    names = [catalog[i].name for i in denied] or [t.name for t in catalog]
    match fault:
        case "off":
            return None
        case "ok":
            return ScriptedGenerator({"tools": [t.name for t in catalog][:3]})
        case "garbage":
            return ScriptedGenerator({"tools": "not a list", "x": [1, 2]})
        case "names_denied":  # a re-ranker that insists on exactly the denied tools
            return ScriptedGenerator({"tools": names})
        case "raise":
            return ScriptedGenerator(error=RuntimeError("injected"))
    return ScriptedGenerator(hang=True)


catalogs = st.lists(
    st.tuples(st.sampled_from(WORDS), st.lists(st.sampled_from(WORDS), max_size=4)),
    min_size=2,
    max_size=10,
)
requests = st.lists(
    st.lists(st.sampled_from([*WORDS, "please", ""]), max_size=4).map(" ".join),
    min_size=1,
    max_size=3,
)


@given(
    raw_tools=catalogs,
    queries=requests,
    schedule=st.lists(st.sampled_from(EMBEDDER_FAULTS), max_size=5),
    rerank_fault=st.sampled_from(RERANK_FAULTS),
    decider_fails=st.booleans(),
    route=st.booleans(),
    data=st.data(),
)
@settings(max_examples=50, deadline=None)
def test_no_denied_tool_in_any_result_under_any_fault(
    raw_tools: list[tuple[str, list[str]]],
    queries: list[str],
    schedule: list[str],
    rerank_fault: str,
    decider_fails: bool,
    route: bool,
    data: st.DataObject,
) -> None:
    catalog = Catalog.from_mcp_servers(
        {
            f"server{i % 3}": {
                "tools": [
                    {"name": f"{name}_{j}", "description": " ".join(words)}
                    for j, (name, words) in enumerate(raw_tools)
                    if j % 3 == i % 3
                ]
            }
            for i in range(min(3, len(raw_tools)))
        }
    )
    ids = list(catalog.ids)
    denied = data.draw(st.lists(st.sampled_from(ids), min_size=1, unique=True), label="denied")
    tenant_denied = data.draw(st.lists(st.sampled_from(ids), unique=True), label="tenant")
    allow = data.draw(
        st.none() | st.lists(st.sampled_from(ids), min_size=1, unique=True), label="allow"
    )
    tenant = ToolAccess(deny=tenant_denied)
    never = set(denied) | set(tenant_denied)
    permitted = set(ids) - never if allow is None else set(allow) - never
    # Every rule that adds tools regardless of ranking names a denied one.
    always = (denied[0],)
    related = {ids[0]: [denied[-1]]}
    sets = [ToolSet(name="pinned", members=[denied[0], ids[-1]], anchors=[ids[-1]])]
    embedder = FaultyEmbedder(schedule)
    decider = ScriptedDecider(
        error=DecisionError("overloaded", "injected", retryable=True) if decider_fails else None
    )
    config = EngineConfig(
        cache=False,
        deadlines=Deadlines(embed_s=EMBED_S),
        warmup=WarmupConfig(wait=False),
        rerank=RerankConfig(enabled=rerank_fault != "off", deadline_s=0.1),
        routing=RoutingConfig(generative=False),
        selection=SelectionDefaults(route_servers=route, max_tools=2, always_active=always),
    )

    def check(shown: Sequence[str] | None, where: str) -> None:
        assert shown is not None, f"{where}: 'every tool' would include a denied one"
        assert not set(shown) & never, f"{where} showed {set(shown) & never}"
        assert set(shown) <= permitted, f"{where} showed tools outside the allow-list"

    async def main() -> None:
        async with open_engine(
            catalog,
            config=config,
            embedder=embedder,
            run_cpu=virtual_cpu(embedder),
            decider=decider,
            generator=generator_for(rerank_fault, catalog, denied),
            tool_sets=sets,
        ) as engine:
            access: dict[str, Any] = {"deny": denied, "allow": allow, "tenant": tenant}
            for query in [*queries, ""]:
                selection = await engine.select(
                    query, related=related, forced_sets=["pinned"], explain=denied, **access
                )
                check(selection.tool_ids, "select")
                for explanation in selection.explanations:
                    assert explanation.shown or explanation.reason in {"denied", "dedup"}
                found = await engine.search_tools({"query": query or "x"}, session="s", **access)
                names = {t["name"] for t in found["tools"]}
                assert not names & {catalog[i].name for i in never if catalog[i].name in names}
                conversation: list[dict[str, Any]] = [{"role": "user", "content": query}]
                for _page in range(3):  # first page, next page, every tool
                    step = await engine.prepare_step(
                        conversation, session="s", force_sets=["pinned"], **access
                    )
                    check(step.tool_ids, f"step page {step.page}")
                    conversation.append({"role": "assistant", "content": query or "thinking"})

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_tool_index_denies_pinned_related_and_set_members() -> None:
    catalog = Catalog.from_plain(
        [
            {"name": "get_weather", "description": "Weather forecast for a city"},
            {"name": "send_email", "description": "Send an email"},
            {"name": "read_file", "description": "Read a file"},
        ]
    )
    index = ToolIndex(catalog, embedder=None, cache=None)
    selection = index.select(
        "weather email file",
        always_active=["read_file"],
        related={"get_weather": ["send_email"]},
        tool_sets=[ToolSet(name="s", members=["send_email"], anchors=["get_weather"])],
        forced_sets=["s"],
        deny=["read_file", "send_email"],
    )
    assert selection.tool_ids == ("get_weather",)


def test_allow_list_narrows_before_recall_so_the_cap_fills_with_allowed_tools() -> None:
    tools = [{"name": f"weather_{i}", "description": "weather forecast"} for i in range(20)]
    tools.append({"name": "almanac", "description": "weather history, barely"})
    index = ToolIndex(Catalog.from_plain(tools), embedder=None, cache=None)
    selection = index.select("weather forecast", max_tools=3, allow=["almanac", "weather_19"])
    assert set(selection.tool_ids) == {"almanac", "weather_19"}


def test_tenant_and_request_lists_both_narrow() -> None:
    access = ToolAccess(allow=["a", "b", "c"], deny=["c"]).narrowed(
        ToolAccess(allow=["b", "c", "d"], deny=["x"])
    )
    assert access.allow == frozenset({"b", "c"})
    assert access.deny == frozenset({"c", "x"})
    assert access.only(["a", "b", "c", "d"]) == ("b",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"deny": "get_weather"}, "deny must be a list of tool ids, got str"),
        ({"allow": [1]}, "allow must hold tool ids"),
        ({"tenant": {"deny": ["a"]}}, "tenant must be a ToolAccess, got dict"),
    ],
)
def test_a_wrong_list_is_a_clear_error(kwargs: dict[str, Any], message: str) -> None:
    index = ToolIndex(Catalog.from_plain([{"name": "a", "description": "b"}]), embedder=None)
    with pytest.raises(ConfigError, match=message):
        index.select("b", **kwargs)

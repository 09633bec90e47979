"""``ToolSearch`` answers a vendor's search with the engine's ranking: dedup, allow and deny,
and fail-open when the engine itself fails."""

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

from toolroute import Catalog, ConfigError, EngineConfig, Policy, Tool, ToolAccess
from toolroute._core.config import Deadlines, DedupConfig, SelectionDefaults, WarmupConfig
from toolroute._core.errors import EngineCrashed
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder
from toolroute.tool_search import ToolSearch, search_tool

WORDS = ["weather", "email", "issue", "calendar", "file", "song", "flight", "invoice"]
EMBEDDER_FAULTS = ("ok", "raise", "hang", "nan")


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
        if fault == "raise":
            raise RuntimeError("injected")
        vectors = self.inner.embed(texts)
        return np.full_like(vectors, np.nan) if fault == "nan" else vectors


def virtual_cpu(embedder: FaultyEmbedder) -> Callable[..., Any]:
    """CPU work inline, a hang as a long virtual sleep (threads and autojump do not mix)."""

    async def run_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        async with limiter:
            result = fn(*args)
            if embedder.hang:
                await trio.sleep(3600)
            return result

    return run_cpu


DEMO = Catalog.demo()
QUERIES = ["weather forecast for Lisbon", "open an issue about the login bug", "search my email"]
KEYWORD = EngineConfig(cache=False)


def host_tools(vendor: str, catalog: Catalog) -> list[dict[str, Any]]:
    if vendor == "anthropic":
        return [{"name": t.id, "description": t.description, "input_schema": {}} for t in catalog]
    return [{"type": "function", "name": t.id, "description": t.description} for t in catalog]


def call(vendor: str, query: object) -> dict[str, Any]:
    if vendor == "anthropic":
        return {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "search_tools",
            "input": {"query": query},
        }
    return {
        "type": "tool_search_call",
        "call_id": "c1",
        "execution": "client",
        "arguments": {"query": query},
    }


def found(vendor: str, answer: dict[str, Any]) -> list[str]:
    if vendor == "anthropic":
        return [b["tool_name"] for b in answer["content"] if b["type"] == "tool_reference"]
    return [t["name"] for t in answer["tools"]]


class FailingEngine:
    """An engine whose selection fails as a crashed service does; its snapshot stays."""

    def __init__(self, engine: Any, error: BaseException) -> None:
        self.catalog, self.index, self.dedup = engine.catalog, engine.index, engine.dedup
        self.error = error
        self.selects = 0

    async def select(self, query: str, **options: Any) -> Any:
        self.selects += 1
        raise self.error


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
async def test_answers_name_the_tools_select_ranks_best_first(vendor: str) -> None:
    async with open_engine(DEMO, config=KEYWORD, embedder=HashingEmbedder()) as engine:
        await engine.ready()  # both rankings from the same index, not one from warm-up's
        search = ToolSearch(engine, vendor, host_tools(vendor, DEMO), k=4)
        for query in QUERIES:
            selection = await engine.select(
                query, policy=Policy(max_tools=4, threshold=None, adaptive=False)
            )
            assert found(vendor, await search.answer(call(vendor, query))) == list(
                selection.tool_ids
            )


async def test_the_model_may_ask_for_fewer_tools_never_more() -> None:
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        search = ToolSearch(engine, "openai", host_tools("openai", DEMO), k=3)
        few = {
            "type": "tool_search_call",
            "call_id": "c",
            "arguments": {"query": "weather", "limit": 2},
        }
        many = {
            "type": "tool_search_call",
            "call_id": "c",
            "arguments": {"query": "weather", "limit": 9},
        }
        assert len((await search.answer(few))["tools"]) == 2
        assert len((await search.answer(many))["tools"]) == 3


async def test_a_duplicate_is_found_once_by_its_representative() -> None:
    issue = "Open an issue in a repository"
    twins = Catalog(
        [
            Tool("github__open_issue", "open_issue", issue, server="github"),
            Tool("gitlab__open_issue", "open_issue", issue, server="gitlab"),
            Tool("get_weather", "get_weather", "Weather forecast for a city"),
        ]
    )
    config = EngineConfig(cache=False, dedup=DedupConfig(enabled=True))
    async with open_engine(twins, config=config, embedder=None) as engine:
        search = ToolSearch(engine, "anthropic", host_tools("anthropic", twins))
        names = found("anthropic", await search.answer(call("anthropic", "open an issue")))
    assert names.count("github__open_issue") + names.count("gitlab__open_issue") == 1


async def test_a_representative_the_host_did_not_list_answers_as_its_listed_twin() -> None:
    issue = "Open an issue in a repository"
    twins = Catalog(
        [
            Tool("github__open_issue", "open_issue", issue, server="github"),
            Tool("gitlab__open_issue", "open_issue", issue, server="gitlab"),
            Tool("get_weather", "get_weather", "Weather forecast for a city"),
        ]
    )
    config = EngineConfig(cache=False, dedup=DedupConfig(enabled=True))
    async with open_engine(twins, config=config, embedder=None) as engine:
        assert "gitlab__open_issue" not in engine.index.catalog  # github's is served
        listed = [t for t in host_tools("openai", twins) if t["name"] != "github__open_issue"]
        search = ToolSearch(engine, "openai", listed, k=1)
        names = found("openai", await search.answer(call("openai", "open an issue")))
    assert names == ["gitlab__open_issue"]


async def test_only_tools_the_host_listed_are_answered_and_k_of_them() -> None:
    # The catalogue's best tools for this request are get_*, which the host did not list:
    # the search ranks among the listed tools, so the answer is still three tools.
    listed = Catalog([DEMO[i] for i in DEMO.ids if not i.startswith("get_")])
    query = "weather forecast search"
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        search = ToolSearch(engine, "openai", host_tools("openai", listed), k=3)
        names = found("openai", await search.answer(call("openai", query)))
        narrowed = await engine.select(
            query, policy=Policy(max_tools=3, threshold=None, adaptive=False), allow=listed.ids
        )
    assert names == list(narrowed.tool_ids)
    assert len(names) == 3
    assert all(name in listed for name in names)


async def test_kept_tools_are_sent_loaded_and_never_answered() -> None:
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        tools = host_tools("anthropic", DEMO)
        search = ToolSearch(engine, "anthropic", tools, k=3, keep=["get_forecast"])
        sent = {t["name"]: t for t in search.tools()}
        names = found("anthropic", await search.answer(call("anthropic", "weather forecast")))
    assert "defer_loading" not in sent["get_forecast"]
    assert sent["get_alerts"]["defer_loading"] is True
    assert "defer_loading" not in sent["search_tools"]
    assert len(names) == 3
    assert "get_forecast" not in names


async def test_names_are_matched_by_id_or_by_an_unambiguous_name() -> None:
    # The demo has two tools named "search" (gmail__search, web__search): a host list naming
    # "search" cannot say which, so it is not answered; "search_news" is unambiguous.
    tools = [
        {"name": "search", "input_schema": {}},
        {"name": "search_news", "input_schema": {}},
        {"name": "web__search", "input_schema": {}},
    ]
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        search = ToolSearch(engine, "anthropic", tools, k=5)
        names = found("anthropic", await search.answer(call("anthropic", "search the web news")))
    assert set(names) == {"search_news", "web__search"}


async def test_allow_deny_and_tenant_narrow_what_is_found() -> None:
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        tenant = ToolAccess(deny=["get_forecast"])
        search = ToolSearch(engine, "anthropic", host_tools("anthropic", DEMO), tenant=tenant)
        answer = await search.answer(call("anthropic", "weather forecast"), deny=["get_alerts"])
        names = found("anthropic", answer)
        assert names
        assert not {"get_forecast", "get_alerts"} & set(names)
        only = await search.answer(
            call("anthropic", "email me the weather forecast"), allow=["send_email", "get_forecast"]
        )
        # send_email is allowed; get_forecast is allowed but the tenant denies it.
        assert found("anthropic", only) == ["send_email"]


@pytest.mark.parametrize(
    "error", [EngineCrashed("the step actor crashed"), trio.BrokenResourceError()]
)
async def test_a_failing_engine_is_answered_by_keyword_over_its_index(error: BaseException) -> None:
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        broken = FailingEngine(engine, error)
        search = ToolSearch(broken, "openai", host_tools("openai", DEMO), k=3)
        answer = await search.answer(call("openai", "weather forecast"), deny=["get_forecast"])
        keyword = engine.index.rank("weather forecast", None, 10)
    assert broken.selects == 1
    assert found("openai", answer) == [i for i in keyword.tool_ids if i != "get_forecast"][:3]


async def test_caller_mistakes_are_raised_not_answered() -> None:
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        search = ToolSearch(engine, "anthropic", host_tools("anthropic", DEMO))
        with pytest.raises(ConfigError, match="'tool_use' item, got type 'text'"):
            await search.answer({"type": "text", "text": "hi"})
        with pytest.raises(ConfigError, match="deny must be a list of tool ids"):
            await search.answer(call("anthropic", "x"), deny="get_forecast")  # type: ignore[arg-type]
        broken = ToolSearch(FailingEngine(engine, ConfigError("bad option")), "anthropic", [])
        with pytest.raises(ConfigError, match="bad option"):
            await broken.answer(call("anthropic", "x"))
    with pytest.raises(RuntimeError, match="after the engine closed"):
        await search.answer(call("anthropic", "weather"))
    with pytest.raises(ConfigError, match="unknown tool-search vendor"):
        ToolSearch(engine, "gemini", [])
    with pytest.raises(ConfigError, match="k must be"):
        ToolSearch(engine, "openai", [], k=0)


@pytest.mark.parametrize("vendor", ["anthropic", "openai"])
async def test_a_search_tool_already_in_the_hosts_list_is_sent_once(vendor: str) -> None:
    # Two tools of one name (two tool_search tools) make the vendor refuse the request.
    hosted = {"type": "tool_search"} if vendor == "openai" else search_tool(vendor)
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        search = ToolSearch(engine, vendor, [hosted, *host_tools(vendor, DEMO)])
        sent = search.tools()
        again = ToolSearch(engine, vendor, sent).tools()  # the list tools() returned, fed back
    for request in (sent, again):
        searches = [
            t for t in request if t.get("name") == "search_tools" or t.get("type") == "tool_search"
        ]
        assert searches == [search_tool(vendor)]
        assert request[-1] == search_tool(vendor)
        assert len(request) == len(DEMO) + 1


async def test_namespace_members_of_one_name_are_found_each_in_its_namespace() -> None:
    # OpenAI calls a namespace member by namespace and name: ``search`` may be in both.
    def member(name: str, description: str) -> dict[str, Any]:
        return {"type": "function", "name": name, "description": description}

    listed = [
        {
            "type": "namespace",
            "name": "crm",
            "description": "Customer records",
            "tools": [member("search", "Search customer records by name or email")],
        },
        {
            "type": "namespace",
            "name": "docs",
            "description": "Product documentation",
            "tools": [member("search", "Search the product documentation pages")],
        },
        member("get_forecast", "Daily weather forecast for a city"),
    ]
    async with open_engine(Catalog.from_tools(listed), config=KEYWORD, embedder=None) as engine:
        search = ToolSearch(engine, "openai", listed, k=1)
        for query, namespace in [("customer records", "crm"), ("documentation pages", "docs")]:
            answer = await search.answer(call("openai", query))
            [item] = answer["tools"]
            assert (item["name"], [t["name"] for t in item["tools"]]) == (namespace, ["search"])
            assert query in item["tools"][0]["description"]


async def test_a_call_without_a_query_never_reaches_the_engine() -> None:
    async with open_engine(DEMO, config=KEYWORD, embedder=None) as engine:
        broken = FailingEngine(engine, EngineCrashed("unused"))
        answer = await ToolSearch(broken, "anthropic", []).answer(call("anthropic", None))
    assert answer["is_error"] is True
    assert broken.selects == 0


catalogs = st.lists(
    st.tuples(st.sampled_from(WORDS), st.lists(st.sampled_from(WORDS), max_size=4)),
    min_size=2,
    max_size=10,
)


@given(
    raw_tools=catalogs,
    queries=st.lists(
        st.lists(st.sampled_from(WORDS), max_size=3).map(" ".join), min_size=1, max_size=3
    ),
    schedule=st.lists(st.sampled_from(EMBEDDER_FAULTS), max_size=4),
    engine_fails=st.booleans(),
    vendor=st.sampled_from(["anthropic", "openai"]),
    data=st.data(),
)
@settings(max_examples=40, deadline=None)
def test_no_denied_tool_is_ever_found_under_any_fault(
    raw_tools: list[tuple[str, list[str]]],
    queries: list[str],
    schedule: list[str],
    engine_fails: bool,
    vendor: str,
    data: st.DataObject,
) -> None:
    catalog = Catalog.from_plain(
        [
            {"name": f"{name}_{j}", "description": " ".join(words)}
            for j, (name, words) in enumerate(raw_tools)
        ]
    )
    ids = list(catalog.ids)
    denied = data.draw(st.lists(st.sampled_from(ids), min_size=1, unique=True), label="denied")
    tenant_denied = data.draw(st.lists(st.sampled_from(ids), unique=True), label="tenant")
    allow = data.draw(
        st.none() | st.lists(st.sampled_from(ids), min_size=1, unique=True), label="allow"
    )
    never = set(denied) | set(tenant_denied)
    permitted = (set(ids) if allow is None else set(allow)) - never
    embedder = FaultyEmbedder(schedule)
    config = EngineConfig(
        cache=False,
        deadlines=Deadlines(embed_s=0.05),
        warmup=WarmupConfig(wait=False),
        selection=SelectionDefaults(max_tools=2, always_active=(denied[0],)),
    )

    async def main() -> None:
        async with open_engine(
            catalog, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
        ) as engine:
            served: Any = (
                FailingEngine(engine, EngineCrashed("injected")) if engine_fails else engine
            )
            search = ToolSearch(
                served, vendor, host_tools(vendor, catalog), tenant=ToolAccess(deny=tenant_denied)
            )
            for query in queries:
                names = found(
                    vendor,
                    await search.answer(call(vendor, query or "x"), allow=allow, deny=denied),
                )
                assert not set(names) & never, f"found denied {set(names) & never}"
                assert set(names) <= permitted

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

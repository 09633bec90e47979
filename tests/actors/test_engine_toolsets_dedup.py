"""The engine dedups before indexing and keeps tool sets forced or sticky per session."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import trio

from toolroute import Catalog, ConfigError, Outcome, Tool, ToolSet
from toolroute._core.config import (
    DedupConfig,
    EngineConfig,
    SelectionDefaults,
    SessionConfig,
    WarmupConfig,
)
from toolroute._runtime.engine import open_engine
from toolroute.providers import HashingEmbedder

TOOLS = Catalog.from_plain(
    [
        {"name": "get_weather", "description": "Weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a person"},
        {"name": "create_issue", "description": "Open an issue in a GitHub repository"},
        {"name": "search_web", "description": "Search the web for pages"},
        {"name": "read_file", "description": "Read a file from disk"},
        {"name": "list_events", "description": "List calendar events"},
        {"name": "book_flight", "description": "Book a flight ticket"},
    ]
)
ISSUE = "Open an issue in a repository"
# The same tool on three servers: ids differ, the name the model sees does not.
TWINS = Catalog(
    [
        *TOOLS.tools,
        Tool("github__open_issue", "open_issue", ISSUE, server="github"),
        Tool("gitlab__open_issue", "open_issue", ISSUE, server="gitlab"),
    ]
)
THIRD_TWIN = Tool("forgejo__open_issue", "open_issue", ISSUE, server="forgejo")
DEDUP = EngineConfig(cache=False, dedup=DedupConfig(enabled=True))
TRAVEL = ToolSet(
    name="travel",
    members=["book_flight", "get_weather"],
    anchors=["book_flight"],
    anchor_min_similarity=0.5,
    system_prompt="Quote prices in EUR.",
)
MAIL = ToolSet(name="mail", members=["send_email", "list_events"], anchors=["send_email"])


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


class SlowEmbedder:
    """A hashing embedder whose calls take ``delay`` seconds of trio time (see ``run_cpu``)."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.inner = HashingEmbedder(dim=256)
        self.identity, self.dim, self.max_batch = "slow", 256, 16
        self.delay = delay
        self.fail = fail
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        if self.fail:
            raise RuntimeError("model crashed")
        return self.inner.embed(texts)


def virtual_cpu(embedder: SlowEmbedder) -> Callable[..., Any]:
    """CPU work inline, after the embedder's delay in trio time (no threads under MockClock)."""

    async def run_cpu(fn: Callable[..., Any], *args: Any, limiter: trio.CapacityLimiter) -> Any:
        async with limiter:
            await trio.sleep(embedder.delay)
            return fn(*args)

    return run_cpu


# -- dedup ------------------------------------------------------------------------------------


async def test_dedup_is_off_by_default(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(TWINS, config=EngineConfig(cache=False), embedder=None) as engine:
        assert engine.index.catalog is TWINS
        assert engine.dedup.removed == ()
        assert engine.providers_of("gitlab__open_issue") == ("gitlab__open_issue",)


async def test_dedup_before_indexing_keeps_the_providers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TWINS, config=DEDUP, embedder=None) as engine:
        assert "gitlab__open_issue" not in engine.index.catalog
        assert "gitlab__open_issue" in engine.catalog  # still there to look up
        providers = ("github__open_issue", "gitlab__open_issue")
        assert engine.providers_of("github__open_issue") == providers
        assert engine.providers_of("gitlab__open_issue") == providers
        assert [engine.catalog[i].server for i in providers] == ["github", "gitlab"]
        assert engine.providers_of("send_email") == ("send_email",)
        with pytest.raises(ConfigError, match="nope"):
            engine.providers_of("nope")
        selection = await engine.select("open an issue in a repository", max_tools=7)
        assert "github__open_issue" in selection.tool_ids
        assert "gitlab__open_issue" not in selection.tool_ids
        step = await engine.prepare_step(user("open an issue in a repository"))
        assert step.tool_ids is not None
        assert "gitlab__open_issue" not in step.tool_ids


async def test_always_active_names_of_removed_tools_map_to_the_representative(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = EngineConfig(
        cache=False,
        dedup=DedupConfig(enabled=True),
        selection=SelectionDefaults(max_tools=1, always_active=["gitlab__open_issue"]),
    )
    async with open_engine(TWINS, config=config, embedder=None) as engine:
        selection = await engine.select("send an email")
        assert selection.tool_ids[0] == "github__open_issue"
        step = await engine.prepare_step(user("send an email"))
        assert step.tool_ids is not None
        assert step.tool_ids[0] == "github__open_issue"
        assert "gitlab__open_issue" not in step.tool_ids
        explicit = await engine.select("send an email", always_active=["gitlab__open_issue"])
        assert explicit.tool_ids[0] == "github__open_issue"


async def test_update_dedups_the_new_catalogue(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(TWINS, config=DEDUP, embedder=None) as engine:
        await engine.update(add=[THIRD_TWIN])
        assert "forgejo__open_issue" in engine.catalog
        assert "forgejo__open_issue" not in engine.index.catalog
        assert engine.providers_of("forgejo__open_issue") == (
            "github__open_issue",
            "gitlab__open_issue",
            "forgejo__open_issue",
        )
        # Removing the representative promotes the next twin; updates name the given ids.
        await engine.update(remove=["github__open_issue"])
        assert "gitlab__open_issue" in engine.index.catalog
        assert engine.providers_of("forgejo__open_issue") == (
            "gitlab__open_issue",
            "forgejo__open_issue",
        )


async def test_update_without_dedup_keeps_every_twin(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TWINS, config=EngineConfig(cache=False), embedder=None) as engine:
        await engine.update(add=[THIRD_TWIN])
        assert engine.index.catalog is engine.catalog
        assert "forgejo__open_issue" in engine.index.catalog


async def test_embedding_dedup_uses_the_engine_embedder(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder(delay=0.1)
    config = EngineConfig(
        cache=False,
        dedup=DedupConfig(enabled=True, mode="embedding", threshold=0.99),
        warmup=WarmupConfig(wait=True),
    )
    async with open_engine(
        TWINS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        assert [r.name for r in engine.dedup.removed] == ["gitlab__open_issue"]
        assert engine.index.vectors is not None
        assert len(engine.index.vectors) == len(TWINS) - 1


async def test_embedding_dedup_that_fails_serves_every_tool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder(fail=True)
    config = EngineConfig(cache=False, dedup=DedupConfig(enabled=True, mode="embedding"))
    async with open_engine(
        TWINS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder)
    ) as engine:
        assert engine.index.catalog is TWINS
        assert engine.dedup.removed == ()
        async with engine.subscribe(buffer=8) as events:
            await engine.update(add=[THIRD_TWIN])
            seen = []
            async for delivery in events:
                seen.append(delivery.event)
                if delivery.event.type == "catalog.updated":
                    break
        assert "forgejo__open_issue" in engine.index.catalog
        failed = [e for e in seen if e.type == "fail_open" and e.what_failed == "dedup"]
        assert failed
        assert failed[0].operation == "update"
        assert "model crashed" in failed[0].reason


async def test_embedding_dedup_needs_an_embedder() -> None:
    config = EngineConfig(cache=False, dedup=DedupConfig(enabled=True, mode="embedding"))
    with pytest.raises(ConfigError, match="needs an embedder"):
        async with open_engine(TWINS, config=config, embedder=None):
            pass


async def test_tool_set_members_removed_by_dedup_show_their_representative(
    autojump_clock: trio.testing.MockClock,
) -> None:
    issues = ToolSet(name="issues", members=["gitlab__open_issue"], anchors=[])
    async with open_engine(TWINS, config=DEDUP, embedder=None, tool_sets=[issues]) as engine:
        step = await engine.prepare_step(user("send an email"), force_sets=["issues"])
        assert step.tool_ids is not None
        assert "github__open_issue" in step.tool_ids
        assert "gitlab__open_issue" not in step.tool_ids


# -- tool sets per session --------------------------------------------------------------------

ONE_TOOL = EngineConfig(cache=False, selection=SelectionDefaults(max_tools=1))


async def test_forced_set_sticks_to_its_session_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TOOLS, config=ONE_TOOL, embedder=None, tool_sets=[TRAVEL]) as engine:
        first = await engine.prepare_step(user("send an email"), session="a", force_sets=["travel"])
        assert first.tool_ids == ("send_email", "book_flight", "get_weather")
        assert first.active_sets == ("travel",)
        assert first.system_prompts == ("Quote prices in EUR.",)
        later = await engine.prepare_step(user("read a file"), session="a")
        assert later.tool_ids == ("read_file", "book_flight", "get_weather")
        other = await engine.prepare_step(user("read a file"), session="b")
        assert other.tool_ids == ("read_file",)
        assert other.active_sets == ()
        assert other.system_prompts == ()
        empty = await engine.prepare_step([{"role": "user", "content": ""}], session="a")
        assert empty.outcome is Outcome.SKIPPED
        assert empty.tool_ids == ("book_flight", "get_weather")


async def test_sessionless_forced_sets_apply_to_one_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(TOOLS, config=ONE_TOOL, embedder=None, tool_sets=[TRAVEL]) as engine:
        forced = await engine.prepare_step(user("read a file"), force_sets=["travel"])
        assert forced.active_sets == ("travel",)
        plain = await engine.prepare_step(user("read a file"))
        assert plain.tool_ids == ("read_file",)


async def test_released_sets_stop_being_forced(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(
        TOOLS, config=ONE_TOOL, embedder=None, tool_sets=[TRAVEL, MAIL]
    ) as engine:
        await engine.prepare_step(user("read a file"), session="s", force_sets=["travel", "mail"])
        step = await engine.prepare_step(user("read a file"), session="s", release_sets=["mail"])
        assert step.active_sets == ("travel",)
        engine.release_sets("s", ["travel"])
        engine.release_sets("never-seen", ["travel"])  # nothing to release, no error
        step = await engine.prepare_step(user("read a file"), session="s")
        assert step.tool_ids == ("read_file",)
        assert step.active_sets == ()


async def test_anchored_set_stays_for_sticky_steps_then_expires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder()
    config = EngineConfig(
        cache=False,
        selection=SelectionDefaults(max_tools=1),
        sessions=SessionConfig(sticky_steps=3),
        warmup=WarmupConfig(wait=True),
    )
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder), tool_sets=[TRAVEL]
    ) as engine:
        anchored = await engine.prepare_step(user("book a flight ticket to Rome"), session="s")
        assert anchored.outcome is Outcome.APPLIED
        assert anchored.tool_ids == ("book_flight", "get_weather")
        assert anchored.active_sets == ("travel",)
        for _ in range(3):
            follow_up = await engine.prepare_step(user("now the second one"), session="s")
            assert follow_up.active_sets == ("travel",)
            assert follow_up.tool_ids is not None
            assert {"book_flight", "get_weather"} <= set(follow_up.tool_ids)
        expired = await engine.prepare_step(user("now the second one"), session="s")
        assert expired.active_sets == ()
        assert expired.tool_ids is not None
        assert "book_flight" not in expired.tool_ids
        elsewhere = await engine.prepare_step(user("now the second one"), session="t")
        assert elsewhere.active_sets == ()


async def test_sticky_steps_zero_remembers_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    embedder = SlowEmbedder()
    config = EngineConfig(
        cache=False,
        selection=SelectionDefaults(max_tools=1),
        sessions=SessionConfig(sticky_steps=0),
        warmup=WarmupConfig(wait=True),
    )
    async with open_engine(
        TOOLS, config=config, embedder=embedder, run_cpu=virtual_cpu(embedder), tool_sets=[TRAVEL]
    ) as engine:
        anchored = await engine.prepare_step(user("book a flight ticket to Rome"), session="s")
        assert anchored.active_sets == ("travel",)
        follow_up = await engine.prepare_step(user("now the second one"), session="s")
        assert follow_up.active_sets == ()


async def test_select_uses_the_engine_tool_sets(autojump_clock: trio.testing.MockClock) -> None:
    async with open_engine(TOOLS, config=ONE_TOOL, embedder=None, tool_sets=[TRAVEL]) as engine:
        selection = await engine.select("read a file", forced_sets=["travel"])
        assert selection.active_sets == ("travel",)
        assert selection.tool_ids == ("read_file", "book_flight", "get_weather")


async def test_unknown_set_names_are_config_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine(
        TOOLS, config=ONE_TOOL, embedder=None, tool_sets=[TRAVEL, MAIL]
    ) as engine:
        with pytest.raises(ConfigError, match=r"'hotel'.*known: 'travel', 'mail'"):
            await engine.prepare_step(user("x"), session="s", force_sets=["hotel"])
        with pytest.raises(ConfigError, match=r"release_sets.*'hotel'"):
            await engine.prepare_step(user("x"), release_sets=["hotel"])
        with pytest.raises(ConfigError, match="'hotel'"):
            engine.release_sets("s", ["hotel"])
        with pytest.raises(ConfigError, match="must be a list"):
            await engine.prepare_step(user("x"), force_sets="travel")
    async with open_engine(TOOLS, config=ONE_TOOL, embedder=None) as engine:
        with pytest.raises(ConfigError, match="known: none"):
            await engine.prepare_step(user("x"), force_sets=["travel"])


@pytest.mark.parametrize(
    ("tool_sets", "message"),
    [
        ([ToolSet(name="bad", members=["nope"], anchors=[])], "nope"),
        ([TRAVEL, TRAVEL], "unique: 'travel'"),
        (["travel"], "ToolSet"),
    ],
)
async def test_malformed_tool_sets_fail_at_open(tool_sets: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        async with open_engine(TOOLS, config=ONE_TOOL, embedder=None, tool_sets=tool_sets):
            pass


# -- config -----------------------------------------------------------------------------------


def test_config_from_mapping_reads_the_new_sections() -> None:
    config = EngineConfig.from_mapping(
        {
            "dedup": {"enabled": True, "threshold": 0.7, "mode": "content"},
            "sessions": {"sticky_steps": 0},
        }
    )
    assert config.dedup == DedupConfig(enabled=True, threshold=0.7, mode="content")
    assert config.sessions.sticky_steps == 0
    defaults = EngineConfig.from_mapping({})
    assert defaults.dedup == DedupConfig(enabled=False, threshold=0.9, mode="signature")
    assert defaults.sessions.sticky_steps == 3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"dedup": {"threshold": 1.5}}, "threshold must be between 0 and 1"),
        ({"dedup": {"threshold": float("nan")}}, "threshold must be between 0 and 1"),
        ({"dedup": {"mode": "fuzzy"}}, "mode must be one of signature, content, embedding"),
        ({"dedup": {"enabled": "false"}}, "expected true or false"),
        ({"dedup": {"treshold": 0.5}}, "treshold"),
        ({"sessions": {"sticky_steps": -1}}, "sticky_steps must be at least 0"),
    ],
)
def test_config_from_mapping_rejects_bad_values(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig.from_mapping(data)

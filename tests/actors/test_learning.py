"""``Engine.learn`` / ``forget``, catalogue examples and recorded tool calls, in trio time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import trio
import trio.testing
from event_snapshot import skip_snapshot

from toolroute import Catalog, ConfigError, EngineConfig, Tool
from toolroute._runtime.engine import open_engine
from toolroute.events import FailOpen
from toolroute.stores import LearningCache, MemoryLearningStore, Stores
from toolroute.testing import ScriptedEmbedder, inline_cpu

#: Description vectors: each tool on its own axis; requests lean toward "alpha" by words
#: they do not share, and toward what was learned by their fourth axis.
VECTORS: dict[str, Sequence[float]] = {
    "alpha: alpha tool": (1, 0, 0, 0),
    "beta: beta tool": (0, 1, 0, 0),
    "gamma: gamma tool": (0, 0, 1, 0),
    "show me the ledger": (0.2, 0.1, 0, 1),
    "ledger please": (0.3, 0, 0, 1),
    "open the books": (0.3, 0, 0.05, 1),
}
TOOLS = Catalog.from_plain(
    [
        {"name": "alpha", "description": "alpha tool"},
        {"name": "beta", "description": "beta tool"},
        {"name": "gamma", "description": "gamma tool"},
    ]
)
CONFIG = EngineConfig(cache=False)


def embedder(**kwargs: object) -> ScriptedEmbedder:
    return ScriptedEmbedder(dim=4, vectors=VECTORS, **kwargs)  # type: ignore[arg-type]


async def top(engine: object, query: str) -> str:
    selection = await engine.select(query, strategy="semantic")  # type: ignore[attr-defined]
    return str(selection.tool_ids[0])


async def test_what_an_agent_used_ranks_first_for_a_similar_request_until_forgotten(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = embedder()
    async with open_engine(
        TOOLS, config=CONFIG, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        await engine.ready()
        assert await top(engine, "ledger please") == "alpha"
        assert await engine.learn("open the books", ["gamma"]) is True
        assert await top(engine, "ledger please") == "gamma"
        await engine.forget(["beta"])  # another tool's: nothing changes
        assert await top(engine, "ledger please") == "gamma"
        await engine.forget(["gamma"])
        assert await top(engine, "ledger please") == "alpha"
        await engine.learn("open the books", ["beta"])
        await engine.forget()
        assert await top(engine, "ledger please") == "alpha"


async def test_catalogue_examples_count_once_the_engine_is_ready_and_follow_updates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = embedder()
    tools = Catalog(
        [*TOOLS.tools[:1], Tool("beta", "beta", "beta tool", examples=["show me the ledger"])]
    )
    async with open_engine(
        tools, config=CONFIG, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        await engine.ready()
        assert await top(engine, "ledger please") == "beta"
        await engine.forget()  # examples are the tool's own: forgetting keeps them
        assert await top(engine, "ledger please") == "beta"
        await engine.update(replace=[Tool("beta", "beta", "beta tool")])
        await engine.ready()
        assert await top(engine, "ledger please") == "alpha"


@pytest.mark.parametrize(
    ("request_", "tool_ids", "message"),
    [
        ("", ["alpha"], "non-empty request"),
        ("open the books", "alpha", "must be a list"),
        ("open the books", [], "at least one tool id"),
        ("open the books", ["delta"], "no tool with id 'delta'"),
        (3, ["alpha"], "str"),
        (
            None,
            ["alpha"],
            r"^learn: request must be a string \(the request tool_ids served\), got NoneType None$",
        ),
        (["open the books"], ["alpha"], r"got list of 1 items$"),  # not "use prepare_step"
    ],
)
async def test_learn_refuses_a_callers_mistake(
    request_: object, tool_ids: object, message: str, autojump_clock: trio.testing.MockClock
) -> None:
    model = embedder()
    async with open_engine(
        TOOLS, config=CONFIG, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        with pytest.raises(ConfigError, match=message):
            await engine.learn(request_, tool_ids)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="must be a list"):
            await engine.forget("alpha")


async def test_forget_refuses_a_tool_it_knows_nothing_of_as_learn_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = embedder()
    async with open_engine(
        TOOLS, config=CONFIG, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        await engine.ready()
        says = r"^forget: no tool with id 'nosuch' in the catalogue, and nothing learned for it$"
        with pytest.raises(ConfigError, match=says):
            await engine.forget(["alpha", "nosuch"])
        with pytest.raises(ConfigError, match="learn: no tool with id 'nosuch'"):
            await engine.learn("open the books", ["nosuch"])
        await engine.forget(["beta"])  # in the catalogue, nothing learned: nothing to do
        # A tool removed from the catalogue keeps its evidence until it is forgotten by id.
        assert await engine.learn("open the books", ["gamma"]) is True
        await engine.update(remove=["gamma"])
        await engine.forget(["gamma"])
        with pytest.raises(ConfigError, match="no tool with id 'gamma'"):
            await engine.forget(["gamma"])  # now forgotten: unknown


async def test_a_keyword_only_engine_refuses_an_unknown_tool_to_forget() -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        await engine.forget(["alpha"])
        with pytest.raises(ConfigError, match="forget: no tool with id 'nosuch'"):
            await engine.forget(["nosuch"])


async def test_a_failing_embedder_learns_nothing_and_says_why(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = embedder(faults=["ok", "raise"])  # warm-up's batch, then the learned request
    async with open_engine(
        TOOLS, config=CONFIG, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        await engine.ready()
        async with engine.subscribe() as events:
            skip_snapshot(events)
            assert await engine.learn("open the books", ["gamma"]) is False
            event = (await events.receive()).event
        assert isinstance(event, FailOpen)
        assert event.what_failed == "learning"
        assert await top(engine, "ledger please") == "alpha"


async def test_a_hanging_embedder_gives_up_at_the_learning_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = embedder(faults=["ok", "hang"])
    config = EngineConfig.from_mapping({"cache": False, "learning": {"deadline_s": 2.0}})
    async with open_engine(
        TOOLS, config=config, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        await engine.ready()
        started = trio.current_time()
        assert await engine.learn("open the books", ["gamma"]) is False
        assert trio.current_time() - started == pytest.approx(2.0)


async def test_a_keyword_only_engine_learns_nothing() -> None:
    async with open_engine(TOOLS, config=CONFIG, embedder=None) as engine:
        assert await engine.learn("open the books", ["gamma"]) is False
        await engine.forget()


async def test_learned_evidence_survives_a_restart_without_request_text_on_disk(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    store = LearningCache(tmp_path)
    model = embedder()
    for _ in range(2):
        async with open_engine(
            TOOLS,
            config=CONFIG,
            embedder=model,
            run_cpu=inline_cpu(model),
            stores=Stores(learning=store),
        ) as engine:
            await engine.ready()
            if not store.load(model.identity):
                assert await top(engine, "ledger please") == "alpha"
                await engine.learn("open the books", ["gamma"])
            assert await top(engine, "ledger please") == "gamma"
    written = _bytes_under(tmp_path)
    assert written
    assert b"books" not in written
    assert "books".encode("utf-32-le") not in written  # nor as numpy stores strings


def _bytes_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


async def test_request_text_is_kept_only_when_configured(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for keep, expected in ((False, None), (True, "open the books")):
        store, model = MemoryLearningStore(), embedder()
        config = EngineConfig.from_mapping({"cache": False, "learning": {"keep_text": keep}})
        async with open_engine(
            TOOLS,
            config=config,
            embedder=model,
            run_cpu=inline_cpu(model),
            stores=Stores(learning=store),
        ) as engine:
            await engine.learn("open the books", ["gamma"])
        (saved,) = store.load(model.identity)["gamma"]
        assert saved.text == expected
        assert saved.source == "use"
        assert np.isclose(np.linalg.norm(saved.vector), 1.0)


def _conversation() -> list[dict[str, object]]:
    call = {"id": "c1", "type": "function", "function": {"name": "gamma", "arguments": "{}"}}
    return [
        {"role": "user", "content": "open the books"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]


@pytest.mark.parametrize("record", [False, True])
async def test_prepare_step_records_the_tool_calls_it_sees_only_when_asked(
    record: bool, autojump_clock: trio.testing.MockClock
) -> None:
    store, model = MemoryLearningStore(), embedder()
    config = EngineConfig.from_mapping({"cache": False, "learning": {"record_calls": record}})
    async with open_engine(
        TOOLS,
        config=config,
        embedder=model,
        run_cpu=inline_cpu(model),
        stores=Stores(learning=store),
    ) as engine:
        await engine.ready()
        await engine.prepare_step(_conversation(), session="s")
        await engine.prepare_step(_conversation(), session="s")  # seen again: learned once
        await trio.sleep(1)  # the recorded calls are learned in the background
        learned = store.load(model.identity)
        assert ("gamma" in learned) is record
        if record:
            assert len(learned["gamma"]) == 1
            assert await top(engine, "ledger please") == "gamma"


async def test_a_crash_while_learning_ends_the_wait_and_the_service_restarts(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    from toolroute._runtime.learning import Learning

    real, crashes = Learning._learn, []

    async def crash_once(self: Learning, message: object) -> bool:
        if not crashes:
            crashes.append(message)
            raise RuntimeError("a bug in learning")
        return await real(self, message)  # type: ignore[arg-type]

    monkeypatch.setattr(Learning, "_learn", crash_once)
    model = embedder()
    async with open_engine(
        TOOLS, config=CONFIG, embedder=model, run_cpu=inline_cpu(model)
    ) as engine:
        await engine.ready()
        with trio.fail_after(30):  # a reply left open would wait for ever
            assert await engine.learn("open the books", ["gamma"]) is False
            assert await engine.learn("open the books", ["gamma"]) is True
        assert await top(engine, "ledger please") == "gamma"

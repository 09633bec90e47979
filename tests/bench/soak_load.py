"""The soak benchmark's workload: everything that happens to one engine at once.

- callers run ``select`` and ``prepare_step`` until the phase's operations are spent, a share
  of them inside a cancel scope with a random short deadline, plus the odd caller mistake
  (which must raise ``ConfigError``);
- an updater changes the catalogue every few seconds (some updates cancelled mid-way, some
  invalid);
- subscribers join, read for a while (some slowly, so they drop events) and leave;
- decision callers run ``route_servers``, ``decide`` and ``try_decide`` against a vendor that
  fails in every documented way, a provider with a wrong key and one at a closed port.

Every result goes through ``soak_checks``; only the public API is used.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import attrs
import trio
from soak_checks import (
    EVENT_TYPES,
    Snapshots,
    Tally,
    check_decision,
    check_routing,
    check_selection,
    check_step,
)

from toolroute import ConfigError, DecisionError, Engine, Server, Tool, ToolSet
from toolroute.decisions import BooleanQuestion, ChoiceQuestion, DecisionRequest
from toolroute.providers import Decider, HttpDecider

#: Checked on each sampled latency; keeping every one would grow memory with the run.
LATENCY_SAMPLE_EVERY = 97


@dataclass(frozen=True)
class Plan:
    """The knobs of one phase."""

    callers: int = 64
    cancel_share: float = 0.25  # of select/step calls run under a random deadline
    deadline_mean_s: float = 0.002  # mean of those deadlines (exponential)
    slack_s: float = 2.0  # how late past a deadline a call may finish on a loaded machine
    own_bound_s: float = 0.0  # an un-scoped select/step's own deadline (embed_s), if any
    update_every_s: float = 3.0
    subscribers: int = 4
    decision_callers: int = 8
    keyword_only: bool = True
    sessions: int = 5_000  # distinct session ids (more than the engine keeps)
    route_deadline_s: float = 2.0  # the engine's routing.deadline_s


@dataclass
class Providers:
    """Deciders beside the engine's own: ones whose key the vendor rejects, one at a closed
    port. ``make_bad_key`` builds one per call (``fresh``: a rejected key latches, so each
    sees its 401) or returns the same one (then refused without a request once latched)."""

    make_bad_key: Callable[[], HttpDecider]
    closed_port: HttpDecider
    fresh: bool = True


class Catalogue:
    """The soak's own model of the engine's catalogue, and the spare tools updates add."""

    def __init__(self, tools: Sequence[Tool], spare: Sequence[Tool], pinned: int) -> None:
        self.tools = {t.id: t for t in tools}
        self.spare = list(spare)
        self.pinned = tuple(t.id for t in tools[:pinned])  # never removed nor replaced
        self.revision = 0

    def servers(self, tools: dict[str, Tool] | None = None) -> frozenset[str]:
        return frozenset(t.server for t in (tools or self.tools).values() if t.server)

    def server_objects(self) -> list[Server]:
        members: dict[str, list[str]] = {}
        for tool in self.tools.values():
            if tool.server:
                members.setdefault(tool.server, []).append(tool.id)
        return [Server(name, "", tuple(ids)) for name, ids in members.items()]


class Workload:
    """One engine under load; ``run(ops)`` is one phase."""

    def __init__(
        self,
        engine: Engine,
        catalogue: Catalogue,
        tool_sets: Sequence[ToolSet],
        queries: Sequence[str],
        providers: Providers,
        plan: Plan,
        seed: int,
    ) -> None:
        self.engine = engine
        self.catalogue = catalogue
        self.set_names = frozenset(s.name for s in tool_sets)
        self.set_members = sum(len(s.members) for s in tool_sets)
        self.queries = list(queries)
        self.providers = providers
        self.plan = plan
        self.rng = random.Random(seed)
        self.snapshots = Snapshots(catalogue.tools, catalogue.servers())
        self.tally = Tally()
        self._remaining = 0
        self._min_updates = 0
        self._done = trio.Event()
        self._latency_tick = 0
        self._fresh_share = 0.04

    async def run(
        self, ops: int, fresh_share: float = 0.04, peak_first: bool = False, min_updates: int = 0
    ) -> Tally:
        """Run ``ops`` select/step calls with everything else going on; the phase's tally.

        ``fresh_share`` of the requests carry two words never seen before, so the engine's
        bounded caches keep meeting new text (a warm-up sends more of them, to fill those
        caches before the process is measured). ``peak_first`` starts with bursts of long
        requests from every caller at once: the largest embedding batches, whose buffers a
        model runtime keeps, come before the measurement rather than during it. Callers go
        on past ``ops`` until ``min_updates`` catalogue updates happened (a warm-up sees the
        memory peak of swapping indexes).
        """
        self.tally, self._remaining, self._done = Tally(), ops, trio.Event()
        self._min_updates = min_updates
        self._fresh_share = fresh_share
        if peak_first:
            await self._peak_bursts()
        async with trio.open_nursery() as background:
            background.start_soon(self._updater)
            for i in range(self.plan.subscribers):
                background.start_soon(self._subscriber, i)
            for _ in range(self.plan.decision_callers):
                background.start_soon(self._decision_caller)
            async with trio.open_nursery() as callers:
                for _ in range(self.plan.callers):
                    callers.start_soon(self._caller)
            self._done.set()  # background loops finish their current call and return
        return self.tally

    async def _peak_bursts(self, rounds: int = 4) -> None:
        async def long_select(seed: int) -> None:
            # Several requests joined: longer than the embedder's 128-token window.
            text = " ".join(random.Random(seed).sample(self.queries, 12))
            self.tally.ops["peak burst select"] += 1
            await self.engine.select(text)

        for round_ in range(rounds):
            async with trio.open_nursery() as nursery:
                for i in range(self.plan.callers):
                    nursery.start_soon(long_select, round_ * self.plan.callers + i)

    # -- helpers ---------------------------------------------------------------------------

    def _deadline(self, mean: float) -> float:
        return self.rng.expovariate(1.0 / mean)

    async def _timed(
        self, what: str, call: Callable[[], Awaitable[Any]], deadline: float | None, bound: float
    ) -> tuple[bool, Any]:
        """Run ``call`` (under ``deadline`` when given); ``(completed, result)``.

        Checks it finished by the caller's deadline, else by ``bound`` (the engine's own
        deadline), each plus the plan's slack.
        """
        started = trio.current_time()
        result: Any = None
        with trio.move_on_after(math.inf if deadline is None else deadline) as scope:
            result = await call()
        elapsed = trio.current_time() - started
        limit = min(deadline, bound) if deadline is not None else bound
        self.tally.overshoot(elapsed, limit, self.plan.slack_s, what)
        self._latency_tick += 1
        if self._latency_tick % LATENCY_SAMPLE_EVERY == 0 and not scope.cancelled_caught:
            self.tally.sample_latency(elapsed, self.rng)
        if scope.cancelled_caught:
            self.tally.cancelled[what] += 1
        return not scope.cancelled_caught, result

    def _messages(self, query: str) -> list[dict[str, Any]]:
        """The request as one of the conversation shapes agents pass around."""
        rng = self.rng
        shape = rng.randrange(6)
        if shape == 0:
            return [{"role": "user", "content": query}]
        if shape == 1:  # OpenAI Chat after a tool call
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup", "arguments": "{}"},
            }
            return [
                {"role": "system", "content": "You are helpful."},
                {"role": "user", "content": query},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"},
            ]
        if shape == 2:  # Anthropic blocks after a tool use
            return [
                {"role": "user", "content": [{"type": "text", "text": query}]},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "u1", "name": "lookup", "input": {}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1"}]},
            ]
        if shape in (3, 4):  # one or two steps without a tool call: the next pages
            idle = [{"role": "assistant", "content": "Let me think about that."}] * (shape - 2)
            return [{"role": "user", "content": query}, *idle]
        return [{"role": "assistant", "content": ""}]  # no request text: skipped

    def _query(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.01:
            return rng.choice(["", "   ", "🙂" * 40, "x" * 20_000, "a.b_c-d/e\\f"])
        if roll < 0.01 + self._fresh_share:
            return f"{rng.choice(self.queries)} #{rng.randrange(10**9)} w{rng.randrange(10**9)}"
        return rng.choice(self.queries)

    # -- the tasks ---------------------------------------------------------------------------

    async def _caller(self) -> None:
        while self._remaining > 0 or self.tally.ops["update"] < self._min_updates:
            self._remaining -= 1
            deadline = None
            if self.rng.random() < self.plan.cancel_share:
                # A third already expired: cancelled at the call's first checkpoint.
                deadline = self._deadline(self.plan.deadline_mean_s) * self.rng.randrange(3)
            roll = self.rng.random()
            if roll < 0.005:
                await self._caller_mistake()
            elif roll < 0.55:
                await self._select(deadline)
            else:
                await self._step(deadline)
            # A keyword select may never checkpoint: let the other tasks run.
            await trio.lowlevel.checkpoint()

    async def _select(self, deadline: float | None) -> None:
        rng, pinned = self.rng, self.catalogue.pinned
        options: dict[str, Any] = {"max_tools": rng.randint(1, 12), "adaptive": rng.random() < 0.5}
        if rng.random() < 0.2:
            options["always_active"] = rng.sample(pinned, rng.randint(1, 3))
        if rng.random() < 0.1:
            options["threshold"] = rng.uniform(0.0, 0.5)
        if not self.plan.keyword_only and rng.random() < 0.3:
            options["strategy"] = rng.choice(["keyword", "semantic", "combined"])
        at_most = options["max_tools"] + len(options.get("always_active", ())) + self.set_members
        start = self.snapshots.version
        query = self._query()
        self.tally.ops["select"] += 1
        try:
            completed, selection = await self._timed(
                "select",
                lambda: self.engine.select(query, **options),
                deadline,
                self.plan.own_bound_s,
            )
        except Exception as exc:
            self.tally.violated([f"select raised {type(exc).__name__}"], str(exc)[:120])
            return
        if completed:
            self.tally.outcomes[f"select.{selection.outcome.value}"] += 1
            self.tally.violated(
                check_selection(
                    selection,
                    self.snapshots.ids(start, self.snapshots.version),
                    at_most=at_most,
                    keyword_only=self.plan.keyword_only,
                )
            )

    async def _step(self, deadline: float | None) -> None:
        rng = self.rng
        session = f"s{rng.randrange(self.plan.sessions)}" if rng.random() < 0.7 else None
        kwargs: dict[str, Any] = {"session": session}
        if rng.random() < 0.1:
            kwargs["force_sets"] = rng.sample(sorted(self.set_names), 1)
        elif rng.random() < 0.05:
            kwargs["release_sets"] = sorted(self.set_names)
        messages = self._messages(self._query())
        start = self.snapshots.version
        self.tally.ops["prepare_step"] += 1
        try:
            completed, step = await self._timed(
                "prepare_step",
                lambda: self.engine.prepare_step(messages, **kwargs),
                deadline,
                self.plan.own_bound_s,
            )
        except Exception as exc:
            self.tally.violated([f"prepare_step raised {type(exc).__name__}"], str(exc)[:120])
            return
        if completed:
            self.tally.outcomes[f"step.{step.outcome.value}"] += 1
            snapshots = self.snapshots.ids(start, self.snapshots.version)
            self.tally.violated(check_step(step, snapshots, self.set_names))

    async def _caller_mistake(self) -> None:
        """A caller's mistake is a clear error, never swallowed by fail-open: ``ConfigError``,
        or Python's ``TypeError`` for an argument the typed call does not take."""
        mistakes: list[Callable[[], Awaitable[object]]] = [
            lambda: self.engine.select("weather", max_toolz=3),  # type: ignore[call-arg]
            lambda: self.engine.select("weather", always_active=["no such tool"]),
            lambda: self.engine.prepare_step([{"role": "user", "content": "hi"}], force_sets=["?"]),
        ]
        self.tally.ops["caller_mistake"] += 1
        try:
            await self.rng.choice(mistakes)()
        except ConfigError:
            self.tally.errors["ConfigError (caller mistake)"] += 1
        except TypeError as exc:  # an unknown keyword: Python's own error for a typed call
            if "unexpected keyword argument" in str(exc):
                self.tally.errors["TypeError (unknown argument)"] += 1
            else:
                self.tally.violated(["caller mistake raised TypeError"], str(exc)[:120])
        except Exception as exc:
            self.tally.violated([f"caller mistake raised {type(exc).__name__}"], str(exc)[:120])
        else:
            self.tally.violated(["a caller mistake was accepted"])

    async def _updater(self) -> None:
        while not self._done.is_set():
            with trio.move_on_after(self.plan.update_every_s):
                await self._done.wait()
            if self._done.is_set():
                return
            await self._update()
            if self.rng.random() < 0.1:
                await self._invalid_update()

    async def _update(self) -> None:
        rng, model = self.rng, self.catalogue
        movable = [i for i in model.tools if i not in model.pinned]
        k = min(rng.randint(1, 20), len(model.spare), len(movable) // 2)
        chosen = rng.sample(movable, 2 * k)
        remove, revise = chosen[:k], chosen[k:]
        model.revision += 1
        replace = [
            attrs.evolve(
                model.tools[i], description=f"{model.tools[i].description} (r{model.revision})"
            )
            for i in revise
        ]
        add = [model.spare.pop(rng.randrange(len(model.spare))) for _ in range(k)]
        after = {i: t for i, t in model.tools.items() if i not in remove}
        after.update({t.id: t for t in (*replace, *add)})
        before_ids, before_servers = frozenset(model.tools), model.servers()
        # Readers may see the new snapshot as soon as the engine swaps it in.
        self.snapshots.push(after, model.servers(after))
        deadline = self._deadline(0.05) if rng.random() < 0.3 else math.inf
        self.tally.ops["update"] += 1
        try:
            with trio.move_on_after(deadline) as scope:
                await self.engine.update(add=add, remove=remove, replace=replace)
        except Exception as exc:
            self.tally.violated([f"update raised {type(exc).__name__}"], str(exc)[:120])
        if scope.cancelled_caught:
            self.tally.cancelled["update"] += 1
        served = frozenset(self.engine.catalog.ids)
        if served == frozenset(after):
            model.spare.extend(model.tools[i] for i in remove)
            model.tools = after
        elif served == before_ids:  # cancelled before the swap: nothing changed
            model.spare.extend(add)
            self.snapshots.push(before_ids, before_servers)
        else:
            self.tally.violated(["update left a catalogue that is neither the old nor the new"])
            model.tools = {t.id: t for t in self.engine.catalog}
            self.snapshots.push(model.tools, model.servers())

    async def _invalid_update(self) -> None:
        before = self.engine.catalog.ids
        self.tally.ops["invalid_update"] += 1
        try:
            await self.engine.update(remove=["no such tool"])
        except ConfigError:
            self.tally.errors["ConfigError (invalid update)"] += 1
        except Exception as exc:
            self.tally.violated([f"invalid update raised {type(exc).__name__}"], str(exc)[:120])
        else:
            self.tally.violated(["an invalid update was accepted"])
        if self.engine.catalog.ids != before:
            self.tally.violated(["an invalid update changed the catalogue"])

    async def _subscriber(self, index: int) -> None:
        rng = random.Random(self.rng.random())
        while not self._done.is_set():
            buffer = rng.choice([1, 4, 16, 256])
            slow = rng.random() < 0.3  # a slow reader loses events and must learn how many
            last_version = -1
            self.tally.ops["subscribe"] += 1
            with trio.move_on_after(rng.uniform(0.05, 2.0)):
                async with self.engine.subscribe(buffer=buffer) as deliveries:
                    received = 0
                    async for delivery in deliveries:
                        event, dropped = delivery.event, delivery.dropped
                        self.tally.events[event.type] += 1
                        self.tally.dropped_events += dropped
                        received += 1
                        broken = []
                        if (event.type == "subscription.started") != (received == 1):
                            broken.append("delivery: the snapshot is not exactly the first")
                        if not isinstance(dropped, int) or dropped < 0:
                            broken.append("delivery: dropped is not a count")
                        if event.type not in EVENT_TYPES:
                            broken.append("delivery: unknown event type")
                        if event.type == "service.restarted":
                            broken.append("a supervised service crashed and restarted")
                        if event.type == "catalog.updated":
                            if event.version <= last_version:
                                broken.append("catalog.updated versions out of order")
                            last_version = event.version
                        self.tally.violated(broken, f"subscriber {index}")
                        if slow:
                            await trio.sleep(0.01)
                        if self._done.is_set():
                            break

    # -- decisions and routing -------------------------------------------------------------

    def _request(self) -> DecisionRequest:
        rng = self.rng
        questions: dict[str, BooleanQuestion | ChoiceQuestion] = {}
        for i in range(rng.randint(1, 8)):
            if rng.random() < 0.7:
                questions[f"q{i}"] = BooleanQuestion(f"Does the request need tool {i}?")
            else:
                options: dict[str, Any] = {"formal": None, "casual": None, "terse": None}
                questions[f"q{i}"] = ChoiceQuestion("Which tone fits?", options)
        return DecisionRequest(state={"request": self._query()[:2000]}, questions=questions)

    async def _decision_caller(self) -> None:
        while not self._done.is_set():
            roll = self.rng.random()
            if roll < 0.4:
                await self._route()
            elif roll < 0.75:
                await self._decide(None, "decide", expect=None)
            elif roll < 0.85:
                await self._try_decide()
            elif roll < 0.92:
                bad = self.providers.make_bad_key()
                try:
                    await self._decide(bad, "decide (wrong key)", expect="authentication")
                finally:
                    if self.providers.fresh:
                        with trio.move_on_after(2.0, shield=True):
                            await bad.aclose()
            else:
                await self._decide(self.providers.closed_port, "decide (closed port)", "network")

    async def _route(self) -> None:
        rng = self.rng
        query: Any = self._query()
        if rng.random() < 0.5:
            query = self._messages(query or "help")
        servers: list[Server] | None = None
        if rng.random() < 0.3:
            objects = self.catalogue.server_objects()
            servers = rng.sample(objects, rng.randint(1, len(objects)))
        session = f"s{rng.randrange(self.plan.sessions)}" if rng.random() < 0.5 else None
        deadline = rng.uniform(0.01, 3.0) if rng.random() < 0.5 else None
        start = self.snapshots.version
        self.tally.ops["route_servers"] += 1
        try:
            completed, routing = await self._timed(
                "route_servers",
                lambda: self.engine.route_servers(query, session=session, servers=servers),
                deadline,
                self.plan.route_deadline_s,
            )
        except Exception as exc:
            self.tally.violated([f"route_servers raised {type(exc).__name__}"], str(exc)[:120])
            return
        if completed:
            self.tally.outcomes[f"route.{routing.outcome.value}"] += 1
            asked = frozenset(s.id for s in servers) if servers is not None else None
            server_sets = self.snapshots.servers(start, self.snapshots.version)
            self.tally.violated(check_routing(routing, asked, server_sets))

    async def _decide(self, provider: Decider | None, what: str, expect: str | None) -> None:
        request = self._request()
        deadline = self.rng.uniform(0.05, 3.0)
        self.tally.ops[what] += 1
        try:
            completed, result = await self._timed(
                what, lambda: self.engine.decide(request, provider=provider), deadline, math.inf
            )
        except DecisionError as exc:
            self.tally.errors[f"{what}: {exc.kind.value}"] += 1
            # On a loaded machine the 1 s budget may run out before the refusal arrives.
            if expect is not None and exc.kind.value not in (expect, "timeout"):
                self.tally.violated(
                    [f"{what}: {exc.kind.value}, expected {expect}"], str(exc)[:120]
                )
            return
        except Exception as exc:
            self.tally.violated([f"{what} raised {type(exc).__name__}"], str(exc)[:120])
            return
        if completed:
            if expect is not None:
                self.tally.violated([f"{what}: succeeded, expected {expect}"])
            self.tally.outcomes[f"{what}.answered"] += 1
            self.tally.violated(check_decision(result, request))

    async def _try_decide(self) -> None:
        request = self._request()
        budget = self.rng.uniform(0.1, 2.0)
        self.tally.ops["try_decide"] += 1
        try:
            _, result = await self._timed(
                "try_decide",
                lambda: self.engine.try_decide(request, deadline_s=budget),
                None,
                budget,
            )
        except Exception as exc:
            self.tally.violated([f"try_decide raised {type(exc).__name__}"], str(exc)[:120])
            return
        self.tally.outcomes["try_decide." + ("none" if result is None else "answered")] += 1
        if result is not None:
            self.tally.violated(check_decision(result, request))

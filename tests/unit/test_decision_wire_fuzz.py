"""Fuzzing every vendor codec's reply reader with arbitrary JSON and bytes.

Whatever a provider sends back (any status, any body), ``decide`` returns a
:class:`DecisionResult` or raises :class:`DecisionError`, never anything else, and
never hangs: each example runs in virtual time under a hard cap.
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Callable
from typing import Any

import httpx
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolroute import DecisionError
from toolroute.decisions import (
    BooleanQuestion,
    ChoiceQuestion,
    DecisionRequest,
    DecisionResult,
    ScoreQuestion,
)
from toolroute.providers import (
    ClefDecider,
    LayaDecider,
    LogprobDecider,
    OpenAIDecisionsDecider,
    PerplexityDecider,
    RetryPolicy,
    ScaleDownDecider,
    TypeSafeDecider,
    XorDecider,
)

#: The issue asks for 1,000 examples per edge in CI.
EXAMPLES = 1000 if os.environ.get("CI") else 100
KEY = "fz.Qm7tLw94Tbx-key"
NO_RETRY = RetryPolicy(retries=0)
#: Virtual seconds an example may take before it counts as a hang.
HANG_S = 60.0

TYPED = {
    "urgent": BooleanQuestion("Is it urgent?"),
    "team": ChoiceQuestion("Which team?", {"billing": None, "tech": "Technical"}),
    "mood": ScoreQuestion("How upset?", ["calm", "upset", "furious"]),
}
BOOLEAN = {"urgent": BooleanQuestion("Is it urgent?")}

Build = Callable[[httpx.AsyncBaseTransport], Any]

VENDORS: dict[str, tuple[Build, dict[str, Any]]] = {
    "typesafe": (lambda t: TypeSafeDecider(api_key=KEY, transport=t, retry=NO_RETRY), TYPED),
    "typesafe_gateway": (
        lambda t: TypeSafeDecider(gateway_api_key=KEY, transport=t, retry=NO_RETRY),
        TYPED,
    ),
    "laya": (
        lambda t: LayaDecider(
            api_key=KEY, base_url="https://laya.example", transport=t, retry=NO_RETRY
        ),
        TYPED,
    ),
    "xor": (
        lambda t: XorDecider(
            api_key=KEY, base_url="https://xor.example", transport=t, retry=NO_RETRY
        ),
        TYPED,
    ),
    "perplexity": (lambda t: PerplexityDecider(api_key=KEY, transport=t, retry=NO_RETRY), TYPED),
    "clef": (
        lambda t: ClefDecider(account_id="acc", api_key=KEY, transport=t, retry=NO_RETRY),
        TYPED,
    ),
    "openai_decisions": (
        lambda t: OpenAIDecisionsDecider(api_key=KEY, transport=t, retry=NO_RETRY),
        TYPED,
    ),
    "scaledown": (lambda t: ScaleDownDecider(api_key=KEY, transport=t, retry=NO_RETRY), TYPED),
    "logprob": (
        lambda t: LogprobDecider(model="m", api_key=KEY, transport=t, retry=NO_RETRY),
        BOOLEAN,
    ),
}

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["urgent", "team", "mood", "billing", "noul", "choice", "score", "yes"])
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.text(max_size=10)
            | st.sampled_from(
                [
                    "answers",
                    "result",
                    "type",
                    "noul",
                    "probability",
                    "choice",
                    "probabilities",
                    "score",
                    "legend",
                    "confidence",
                    "usage",
                    "model",
                    "error",
                    "errors",
                    "detail",
                    "message",
                    "loc",
                    "msg",
                    "choices",
                    "logprobs",
                    "content",
                    "top_logprobs",
                    "token",
                    "logprob",
                    "scores",
                    "labels",
                    "label",
                    "name",
                    "value",
                    "providerMetadata",
                    "routing",
                    "code",
                    "param",
                    "true",
                    "false",
                    "urgent",
                    "team",
                    "mood",
                ]
            ),
            children,
            max_size=6,
        )
    ),
    max_leaves=25,
)


#: An answer object of a plausible type whose fields hold anything.
ANSWERS = st.fixed_dictionaries(
    {"type": st.sampled_from(["noul", "boolean", "predicate", "choice", "score", "refusal"])},
    optional=dict.fromkeys(
        ("noul", "probability", "choice", "probabilities", "score", "legend", "name"), JSON_VALUES
    ),
)
#: ScaleDown's ``labels`` and the logprob ``top_logprobs`` entries, with anything inside.
ENTRIES = st.fixed_dictionaries(
    {}, optional=dict.fromkeys(("label", "score", "token", "logprob", "value"), JSON_VALUES)
)


@st.composite
def shaped_replies(draw: st.DrawFn) -> object:
    """Bodies shaped like each vendor's reply, with arbitrary values inside."""
    answers = draw(st.dictionaries(st.sampled_from(list(TYPED)), ANSWERS | JSON_VALUES, max_size=3))
    listed = draw(st.lists(ANSWERS | ENTRIES | JSON_VALUES, max_size=4))
    return draw(
        st.sampled_from(
            [
                {"answers": answers, "usage": draw(JSON_VALUES)},
                {"result": {"answers": answers}, "success": True},
                {"answers": listed},
                {"choices": [{"logprobs": {"content": [{"top_logprobs": listed}]}}]},
                {"scores": draw(JSON_VALUES), "labels": listed},
                {"errors": listed, "success": False},
                {"detail": listed},
                {"error": draw(JSON_VALUES)},
            ]
        )
    )


BODIES = (
    st.binary(max_size=200)
    | JSON_VALUES.map(lambda v: json.dumps(v).encode())
    | shaped_replies().map(lambda v: json.dumps(v).encode())
)
STATUSES = st.sampled_from([200, 200, 200, 400, 401, 403, 408, 413, 422, 429, 500, 503, 529])
HEADERS = st.dictionaries(
    st.sampled_from(["retry-after", "retry-after-ms", "x-should-retry", "x-request-id"]),
    st.text(alphabet=string.printable.strip(), max_size=12),
    max_size=2,
)


def run(vendor: str, status: int, body: bytes, headers: dict[str, str]) -> object:
    build, questions = VENDORS[vendor]

    async def handle(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers)

    async def main() -> object:
        decider = build(httpx.MockTransport(handle))
        try:
            with trio.fail_after(HANG_S):
                return await decider.decide(DecisionRequest(state="s", questions=questions))
        except DecisionError as exc:
            return exc
        finally:
            await decider.aclose()

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
@given(vendor=st.sampled_from(sorted(VENDORS)), status=STATUSES, body=BODIES, headers=HEADERS)
def test_any_reply_gives_a_result_or_a_decision_error(
    vendor: str, status: int, body: bytes, headers: dict[str, str]
) -> None:
    # One edge, every codec: the vendor is drawn too, so 1,000 examples in CI spread
    # over the nine readers without multiplying the suite's time by nine.
    outcome = run(vendor, status, body, headers)
    assert isinstance(outcome, DecisionResult | DecisionError)
    if isinstance(outcome, DecisionError):
        assert KEY not in str(outcome)
    else:
        _, questions = VENDORS[vendor]
        assert set(outcome.answers) <= set(questions)

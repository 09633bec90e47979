"""Yes/no probabilities from any OpenAI-compatible chat model's next-token logprobs.

The calibrated yes/no recipe of ``wire-formats.md`` §11.1: one
``POST {base}/chat/completions`` per boolean question with ``max_tokens=1``,
``temperature=0``, ``logprobs=true`` and ``top_logprobs=N``; the answer's
probability is read off the top tokens. Works with OpenAI, vLLM, llama.cpp's
``llama-server`` and Ollama — any server that returns ``top_logprobs``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Unpack

import attrs

from ...._core.decide.limits import DecisionLimits
from ...._core.decide.types import (
    BooleanAnswer,
    BooleanQuestion,
    ChoiceQuestion,
    DecisionRequest,
    Question,
    Usage,
)
from ...._core.decide.wire import logger
from ...._core.errors import ConfigError, DecisionError
from ..._http.async_driver import LoopOptions
from ..._http.retry import Reply
from ..codec import QuestionReply, VendorSpec, bearer_headers
from ..per_question import PerQuestionDecider
from ..wire import Kind, Wire, json_text
from .media_readers import MEDIA_READERS
from .openai_decisions import openai_error

#: OpenAI's ceiling on ``top_logprobs``.
MAX_TOP_LOGPROBS = 20

SYSTEM_PROMPT = (
    "You judge whether a statement is true of the state you are given."
    " Answer with exactly one word: yes or no."
)

#: Providers that answer choice and score questions, for the refusal message.
_TYPED_PROVIDERS = (
    "TypeSafe, Laya, XOR, Perplexity Decisions, Cloudflare Clef, OpenAI Decisions or ScaleDown"
)
_NO_LOGPROBS = (
    "{vendor} did not return logprobs; use a server that supports top_logprobs (vLLM, recent"
    " Ollama, OpenAI, llama.cpp's llama-server) and a model that allows them."
)


def user_prompt(state: str, question: BooleanQuestion) -> str:
    """The user message for ``question`` about ``state`` (already text)."""
    lines = [f"State:\n{state}", "", f"Statement: {question.instructions}"]
    for label, criterion in (("Yes", question.true), ("No", question.false)):
        if criterion is not None:
            lines.append(
                f"{label} means: {json_text(criterion, vendor='Logprob', what='criteria')}"
            )
    lines.append("Answer yes or no.")
    return "\n".join(lines)


SPEC = VendorSpec(
    name="logprob",
    vendor="Logprob decider",
    default_model="",
    default_base_url="https://api.openai.com/v1",
    key_env="TOOLROUTE_LOGPROB_API_KEY",
    requires_key=False,
    limits=DecisionLimits(max_questions=64, timeout_s=10.0, per_question_s=0.5),
    media_hint=MEDIA_READERS,
)


@attrs.frozen
class LogprobCodec:
    """One chat completion per boolean question, read from the next token's logprobs.

    Attributes:
        top_logprobs: top tokens asked for.
        floor: the least probability ``yes`` and ``no`` must hold together.
    """

    top_logprobs: int
    floor: float
    spec: VendorSpec = SPEC

    def headers(self, api_key: str) -> dict[str, str]:
        return bearer_headers(api_key)

    def model_for(self, request: DecisionRequest, default: str) -> str:
        return request.model or default

    def path(self, model: str) -> str:
        return "chat/completions"

    def check_question(self, key: str, question: Question) -> None:
        if not isinstance(question, BooleanQuestion):
            kind = "choice" if isinstance(question, ChoiceQuestion) else "score"
            raise DecisionError(
                Kind.INVALID_REQUEST,
                f"The logprob decider answers boolean questions only; question {key!r} is a"
                f" {kind} question. Ask it of a provider that answers choice and score"
                f" questions: {_TYPED_PROVIDERS}.",
            )

    def question_body(self, text: str, question: Question, model: str) -> object:
        assert isinstance(question, BooleanQuestion)  # check_question ran first
        return {
            "model": model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": user_prompt(text, question)},
            ],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": self.top_logprobs,
        }

    def read_reply(
        self, payload: object, key: str, question: Question, model: str, wire: Wire
    ) -> QuestionReply:
        usage = _chat_usage(payload.get("usage") if isinstance(payload, Mapping) else None)
        resolved = payload.get("model") if isinstance(payload, Mapping) else None
        resolved = resolved if isinstance(resolved, str) and resolved else None
        top = _top_logprobs(payload)
        if top is None:
            raise DecisionError(Kind.SERVER, _NO_LOGPROBS.format(vendor=wire.vendor))
        yes = no = 0.0
        for entry in top:
            token = entry.get("token") if isinstance(entry, Mapping) else None
            logprob = entry.get("logprob") if isinstance(entry, Mapping) else None
            if (
                not isinstance(token, str)
                or isinstance(logprob, bool)
                or not isinstance(logprob, int | float)
                or math.isnan(logprob)
                or logprob > 0
            ):
                # The entry is the server's text: redacted like every other vendor message.
                logger.warning(
                    wire.redact(
                        f"{wire.vendor}: dropped the answer to question {key!r}:"
                        f" malformed top_logprobs entry {entry!r}."
                    )
                )
                return QuestionReply(None, usage, resolved)
            word = token.strip().lower()
            if word == "yes":
                yes += math.exp(logprob)
            elif word == "no":
                no += math.exp(logprob)
        if yes + no <= 0.0:
            logger.warning(
                "%s: question %r unanswered: neither 'yes' nor 'no' is among the top %d tokens"
                " (the model answered something else).",
                wire.vendor,
                key,
                len(top),
            )
            return QuestionReply(None, usage, resolved)
        if yes + no < self.floor:
            logger.warning(
                "%s: question %r unanswered: 'yes' and 'no' hold only %.3f of the next-token"
                " probability, below the floor %.3f.",
                wire.vendor,
                key,
                yes + no,
                self.floor,
            )
            return QuestionReply(None, usage, resolved)
        return QuestionReply(BooleanAnswer(min(1.0, yes / (yes + no))), usage, resolved)

    def error(self, reply: Reply, wire: Wire) -> DecisionError:
        return openai_error(wire, reply)

    def request_id(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-request-id")


class LogprobDecider(PerQuestionDecider):
    """Boolean questions answered by a chat model's ``yes``/``no`` next-token probabilities.

    Vendor-neutral: any OpenAI-compatible ``/chat/completions`` (OpenAI, vLLM,
    llama.cpp, Ollama). One call per question, at most 4 in flight, all inside
    one deadline (default 10 s + 0.5 s per question); each call has the shared
    retries, and a 401 latches. Only :class:`~toolroute.BooleanQuestion` is
    answered: a request holding a choice or score question is refused with
    ``invalid_request`` before any call.

    Each call sends::

        {"model", "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "State:\\n<state>\\n\\nStatement: <instructions>\\n"
                                        "[Yes means: <true>\\n][No means: <false>\\n]"
                                        "Answer yes or no."}],
         "max_tokens": 1, "temperature": 0, "logprobs": true, "top_logprobs": N}

    (the state as text — compact JSON unless a string; a criterion line only
    when that criterion is set).

    **How the probability is computed.** From the first generated token's
    ``top_logprobs`` list (``choices[0].logprobs.content[0].top_logprobs``)::

        yes = Σ exp(logprob) over entries whose token.strip().lower() == "yes"
        no  = Σ exp(logprob) over entries whose token.strip().lower() == "no"
        P(true) = yes / (yes + no)

    so ``"Yes"``, ``" yes"`` and ``"YES"`` all count as yes. A label missing from
    the top N contributes nothing (no guessed floor value is substituted).

    **When it is unavailable.**

    - The question is *unanswered* (a warning is logged) when neither ``yes``
      nor ``no`` is among the top tokens, when ``yes + no`` is below ``floor``
      (the model mostly meant to say something else), or when an entry is
      malformed.
    - The call *fails* with ``DecisionError(server)`` when the reply carries no
      logprobs at all (the server or model does not support ``top_logprobs``).

    The probability is the model's raw preference between the two words, not
    a calibrated one; fit a calibrator on labelled data per model and server
    if you gate on it.

    Args:
        model: the chat model (required; e.g. ``gpt-4.1-mini``, ``qwen3:8b``).
        api_key: sent as ``Authorization: Bearer``; omitted (no header) when
            ``None``, as local servers need none.
        base_url: the OpenAI-compatible base, ``/v1`` included
            (``http://127.0.0.1:8000/v1`` for vLLM, ``http://localhost:11434/v1``
            for Ollama).
        top_logprobs: top tokens asked for, 1–20.
        floor: the least probability ``yes`` and ``no`` must hold together
            among the top tokens for the answer to count, in [0, 1). The
            ratio itself is what constrained decoding to the two words would
            give (vLLM's ``guided_choice`` renormalises the same way), so a
            low mass does not bias it; below the floor the two words are too
            far down the list for their logprobs to be read reliably.
    """

    name = SPEC.name
    vendor = SPEC.vendor
    limits = SPEC.limits

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None = None,
        base_url: str = "https://api.openai.com/v1",
        top_logprobs: int = MAX_TOP_LOGPROBS,
        floor: float = 0.1,
        **options: Unpack[LoopOptions],
    ) -> None:
        if not isinstance(model, str) or not model.strip() or not model.isprintable():
            raise ConfigError("model must be a non-empty string of printable characters")
        if (
            isinstance(top_logprobs, bool)
            or not isinstance(top_logprobs, int)
            or not 1 <= top_logprobs <= MAX_TOP_LOGPROBS
        ):
            raise ConfigError(f"top_logprobs must be an integer in 1..{MAX_TOP_LOGPROBS}")
        if (
            isinstance(floor, bool)
            or not isinstance(floor, int | float)
            or not (math.isfinite(floor) and 0.0 <= floor < 1.0)
        ):
            raise ConfigError(f"floor must be a number in [0, 1), got {floor!r}")
        self.top_logprobs = top_logprobs
        self.floor = float(floor)
        super().__init__(
            LogprobCodec(top_logprobs, float(floor)),
            api_key=api_key,
            base_url=base_url,
            model=model.strip(),
            **options,
        )


def _top_logprobs(payload: object) -> list[Any] | None:
    """``choices[0].logprobs.content[0].top_logprobs``, or ``None`` when absent or empty."""
    choices = payload.get("choices") if isinstance(payload, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    logprobs = first.get("logprobs") if isinstance(first, Mapping) else None
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    token = content[0] if isinstance(content, list) and content else None
    top = token.get("top_logprobs") if isinstance(token, Mapping) else None
    return top if isinstance(top, list) and top else None


def _chat_usage(raw: object) -> Usage:
    """``{prompt_tokens, completion_tokens}`` as :class:`Usage`; 0 when absent."""
    if not isinstance(raw, Mapping):
        return Usage()

    def count(name: str) -> int:
        value = raw.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return 0

    return Usage(input_tokens=count("prompt_tokens"), output_tokens=count("completion_tokens"))

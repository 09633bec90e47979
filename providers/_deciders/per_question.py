"""The loop for endpoints that answer one question per call.

``decide`` makes the one-call loop's local checks first, then sends one call per question, a
few at a time, inside the request's single deadline; each call goes through the shared
provider loop (retries, latch).
"""

from __future__ import annotations

from typing import ClassVar, Unpack

import trio

from ..._core.decide.limits import check_request
from ..._core.decide.types import (
    Answer,
    DecisionRequest,
    DecisionResult,
    Question,
    Usage,
)
from ..._core.decide.wire import logger
from ..._core.errors import DecisionError
from .._http.async_driver import LoopOptions
from .codec import QuestionCodec, QuestionReply
from .loop import HttpDecider
from .wire import Kind, state_text


class PerQuestionDecider(HttpDecider):
    """A decider whose endpoint answers one question per call: a
    :class:`~.codec.QuestionCodec` on the shared loop.

    ``decide`` makes the same local checks as the one-call loop (key, auth latch,
    limits, media, question types) before any network call, then sends one
    call per question, at most :attr:`concurrency` at once, all inside the one
    deadline of the request; each call has the shared retries.

    A call that fails stops further calls from starting. An ``authentication``
    failure is raised at once (and latches). Otherwise, when some questions
    were answered the result carries those and the rest are unanswered (a
    warning is logged); when none was, the first failure (in question order)
    is raised — the batching rule of ``try_decide``, applied per question.

    Args:
        codec: the vendor's per-question wire format.
        api_key, base_url, model, options: as for :class:`~.loop.HttpDecider`.
    """

    #: Calls in flight at once (NeuroLink runs decision batches four at a time).
    concurrency: ClassVar[int] = 4

    def __init__(
        self,
        codec: QuestionCodec,
        *,
        api_key: str | None,
        base_url: str | None = None,
        model: str | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        self._questions = codec
        self._connect(codec, api_key, base_url, model, options)

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        """Answer ``request`` with one call per question.

        Args:
            request: the state and questions; ``timeout_s`` bounds all the calls.

        Returns:
            The answers that came; a question whose call failed (when others
            succeeded) or whose reply was unreadable is missing.

        Raises:
            DecisionError: with ``kind`` and ``retryable``; keyless, latched,
                over-limit and unsupported requests fail before any network call;
                an authentication failure, or every call failing, is raised.

        **Cancellation:** every call runs inside the request's one deadline;
        a caller's cancel scope still cancels them all.

        **Fail-open:** partial: a failed call costs only its own question.
        """
        codec = self._questions
        self._check_credentials()
        model = codec.model_for(request, self.model)
        state_tokens = check_request(request, self.limits, vendor=self.vendor, model=model)
        for key, question in request.questions.items():
            codec.check_question(key, question)
        media = self._prepare(request)
        text = state_text(request.state, vendor=self.vendor)
        calls = [
            (key, question, codec.question_body(text, question, model))
            for key, question in request.questions.items()
        ]
        for _key, _question, body in calls:
            self._check_size(body)
        timeout = self._budget_s(request, state_tokens)
        started = trio.current_time()
        deadline = started + timeout
        path = codec.path(model)
        replies: dict[int, tuple[QuestionReply, str | None]] = {}
        failures: list[tuple[int, DecisionError]] = []
        limiter = trio.CapacityLimiter(self.concurrency)

        async def one(
            index: int, key: str, question: Question, body: object, scope: trio.CancelScope
        ) -> None:
            async with limiter:
                if failures:
                    return
                try:
                    reply = await self._send(path, body, deadline, timeout)
                    read = codec.read_reply(self._payload(reply), key, question, model, self.wire)
                except DecisionError as exc:
                    failures.append((index, exc))
                    if exc.kind is Kind.AUTHENTICATION:
                        scope.cancel()
                else:
                    replies[index] = (read, self.wire.request_id(reply.headers))

        async with trio.open_nursery() as nursery:
            for index, (key, question, body) in enumerate(calls):
                nursery.start_soon(one, index, key, question, body, nursery.cancel_scope)

        for _index, error in failures:
            if error.kind is Kind.AUTHENTICATION:
                raise error
        if failures and not replies:
            raise min(failures, key=lambda failure: failure[0])[1]
        if failures:
            unanswered = [calls[i][0] for i in range(len(calls)) if i not in replies]
            logger.warning(
                self.wire.redact(
                    f"{self.vendor}: {len(unanswered)} of {len(calls)} questions left unanswered"
                    f" ({', '.join(map(repr, unanswered))}) after a failed call:"
                    f" {min(failures, key=lambda failure: failure[0])[1]}"
                )
            )
        answers: dict[str, Answer] = {}
        usage = Usage()
        request_ids: list[str] = []
        resolved: str | None = None
        for index, (key, _question, _body) in enumerate(calls):
            if index not in replies:
                continue
            read, request_id = replies[index]
            if read.answer is not None:
                answers[key] = read.answer
            usage = usage + read.usage
            resolved = resolved or read.model
            if request_id:
                request_ids.append(request_id)
        return DecisionResult(
            model=resolved or model,
            provider=self.name,
            answers=answers,
            usage=usage,
            request_id=",".join(request_ids) or None,
            latency_ms=(trio.current_time() - started) * 1000.0,
            media_bytes=media.media_bytes,
        )

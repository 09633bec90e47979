"""The loop for endpoints that answer one question per call (ScaleDown, the logprob decider).

``decide`` makes the shared loop's local checks first, then sends one call per question, a
few at a time, inside the request's single deadline; each call goes through
:class:`HttpDecider`'s retrying ``_send``.
"""

from __future__ import annotations

from typing import ClassVar

import attrs
import trio

from ..._core.decision import (
    Answer,
    DecisionRequest,
    DecisionResult,
    Question,
    Usage,
)
from ..._core.decision_limits import check_request
from ..._core.decision_wire import logger
from ..._core.errors import DecisionError
from .loop import HttpDecider
from .wire import Kind, state_text


@attrs.frozen
class QuestionReply:
    """One call's reading: the answer (``None`` when unanswered), usage and model."""

    answer: Answer | None
    usage: Usage = attrs.field(factory=Usage)
    model: str | None = None


class PerQuestionDecider(HttpDecider):
    """An :class:`HttpDecider` whose endpoint answers one question per call.

    ``decide`` makes the same local checks as the shared loop (key, auth latch,
    limits, media, question types) before any network call, then sends one
    call per question, at most :attr:`concurrency` at once, all inside the one
    deadline of the request; each call has the shared retries.

    A call that fails stops further calls from starting. An ``authentication``
    failure is raised at once (and latches). Otherwise, when some questions
    were answered the result carries those and the rest are unanswered (a
    warning is logged); when none was, the first failure (in question order)
    is raised — the batching rule of ``try_decide``, applied per question.

    Subclasses implement :meth:`_check_question`, :meth:`_question_body` and
    :meth:`_read_reply`.
    """

    #: Whether a call without an API key is refused locally.
    #: Calls in flight at once (NeuroLink runs decision batches four at a time).
    concurrency: ClassVar[int] = 4

    # -- per-question codec --------------------------------------------------

    def _check_question(self, key: str, question: Question) -> None:
        """Raise ``invalid_request`` for a question this endpoint cannot answer."""

    def _question_body(self, text: str, question: Question, model: str) -> object:
        raise NotImplementedError

    def _read_reply(
        self, payload: object, key: str, question: Question, model: str
    ) -> QuestionReply:
        raise NotImplementedError

    def _model_for(self, request: DecisionRequest) -> str:
        return request.model or self.model

    # -- the loop -------------------------------------------------------------

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
        self._check_credentials()
        model = self._model_for(request)
        state_tokens = check_request(request, self.limits, vendor=self.vendor, model=model)
        for key, question in request.questions.items():
            self._check_question(key, question)
        media = self._prepare(request)
        text = state_text(request.state, vendor=self.vendor)
        calls = [
            (key, question, self._question_body(text, question, model))
            for key, question in request.questions.items()
        ]
        for _key, _question, body in calls:
            self._check_size(body)
        timeout = self._budget_s(request, state_tokens)
        started = trio.current_time()
        deadline = started + timeout
        path = self._path(model)
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
                    read = self._read_reply(self._payload(reply), key, question, model)
                except DecisionError as exc:
                    failures.append((index, exc))
                    if exc.kind is Kind.AUTHENTICATION:
                        scope.cancel()
                else:
                    replies[index] = (read, self._request_id(reply.headers))

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

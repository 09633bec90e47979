"""The wording of the synchronous JSON client's failures: plain :class:`ProviderError` s.

An :class:`~.retry.ErrorCodec` for an OpenAI-compatible JSON API that has no error kinds of its
own (the remote embedder): every message names the request and says what was expected and
what came; a 401 or 403 latches the client.
"""

from __future__ import annotations

import json

import attrs

from ..._core.errors import ProviderError
from .retry import Redactor, Reply, TransportError
from .rules import is_retryable_status


@attrs.frozen
class PlainErrors:
    """Failures of one request (``what``, e.g. ``POST host/v1/embeddings``), redacted.

    Attributes:
        redact: the client's redactor.
        what: the request, as quoted at the start of every message.
    """

    redact: Redactor
    what: str

    def refused(self, reply: Reply) -> ProviderError:
        message = self.redact(
            f"{self.what}: expected HTTP 2xx, got HTTP {reply.status}: {self._excerpt(reply)}"
        )
        return ProviderError(
            message, status=reply.status, retryable=is_retryable_status(reply.status)
        )

    def is_auth_failure(self, error: ProviderError) -> bool:
        return error.status in (401, 403)

    def latched(self, cause: ProviderError) -> ProviderError:
        return ProviderError(
            self.redact(
                f"{self.what}: not sent, because an earlier request was refused with"
                f" HTTP {cause.status}; build a new client with valid credentials"
            ),
            status=cause.status,
            retryable=False,
        )

    def unreachable(self, failure: TransportError) -> ProviderError:
        return ProviderError(
            self.redact(str(failure)), status=failure.status, retryable=failure.retryable
        )

    def too_late(self, budget_s: float, last: ProviderError | None) -> ProviderError:
        # The sync client caps every wait by the deadline itself, so the last failure says it.
        after = f": {last}" if last is not None else ""
        return ProviderError(
            self.redact(f"{self.what}: no answer within {budget_s:g} s{after}"), retryable=True
        )

    def given_up(self, error: ProviderError, reason: str) -> ProviderError:
        return ProviderError(self.redact(f"{error}; {reason}"), status=error.status, retryable=True)

    def _excerpt(self, reply: Reply) -> str:
        """The body quoted, reading the OpenAI-style envelope when there is one."""
        if not reply.body:
            return "an empty body"
        text = reply.body.decode("utf-8", errors="replace")
        try:
            decoded = json.loads(text)
        except (ValueError, RecursionError):
            decoded = None
        # OpenAI-style envelope: {"error": {"message", "type", "code"}}.
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
            error = decoded["error"]
            labels = [str(error[k]) for k in ("type", "code") if error.get(k) is not None]
            text = (
                f"{'/'.join(labels)}: {error.get('message', '')}"
                if labels
                else str(error.get("message", text))
            )
        return repr(self.redact.cut(text))

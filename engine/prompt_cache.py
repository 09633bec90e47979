"""Prompt-cache mode: send the whole tool list, unchanged, and restrict what may be called.

A host that sends every tool on every step keeps the vendor's prompt cache; toolroute then
decides what the model may *call*, in the vendor's own restriction, and keeps that set sticky
so it changes only when the conversation's topic does::

    from toolroute.prompt_cache import StickyPicks, restriction, stable_order

    picks = StickyPicks()                                  # one per conversation
    step = await engine.prepare_step(messages, session=conversation_id)
    picks = picks.advance(step.tool_ids or (), engine.catalog.ids)
    request["tool_choice"] = restriction("openai-responses", names_of(picks.tool_ids))

``restriction`` gives OpenAI's ``tool_choice`` ``allowed_tools`` (Responses and Chat
Completions) and Gemini's ``tool_config``; Anthropic publishes no allow-list, so it returns
``None`` and the host refuses a call outside the set on the reply (``permitted_call``). A
host that narrows the list instead sends ``stable_order(picks.tool_ids, …)``: the same set
always renders as the same bytes.
"""

from ._core.public import publish as _publish
from ._core.select.prompt_cache import StickyPicks as StickyPicks
from ._core.select.prompt_cache import permitted_call as permitted_call
from ._core.select.prompt_cache import restriction as restriction
from ._core.select.prompt_cache import same_topic as same_topic
from ._core.select.prompt_cache import stable_order as stable_order

__all__ = ["StickyPicks", "permitted_call", "restriction", "same_topic", "stable_order"]

_publish(__name__, globals())

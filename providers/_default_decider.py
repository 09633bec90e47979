"""Which decision provider the environment configures, in NeuroLink's order."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import ConfigError
from ._decision_loop import HttpDecider
from ._logprob import LogprobDecider
from ._openai_decisions import OpenAIDecisionsDecider
from ._scaledown import ScaleDownDecider
from ._system_one import ClefDecider, LayaDecider, PerplexityDecider, TypeSafeDecider, XorDecider

Env = Mapping[str, str]


def _get(env: Env, name: str) -> str | None:
    # A blank or whitespace-only value counts as absent.
    value = env.get(name, "").strip()
    return value or None


def _typesafe(env: Env) -> HttpDecider | None:
    direct, gateway = _get(env, "TYPESAFE_API_KEY"), _get(env, "AI_GATEWAY_API_KEY")
    if not (direct or gateway):
        return None
    route: Any = _get(env, "TYPESAFE_TRANSPORT")
    base = _get(
        env, "TYPESAFE_GATEWAY_URL" if route == "gateway" or not direct else "TYPESAFE_BASE_URL"
    )
    return TypeSafeDecider(
        api_key=direct,
        gateway_api_key=gateway,
        route=route,
        base_url=base,
        model=_get(env, "TYPESAFE_MODEL"),
    )


def _laya(env: Env) -> HttpDecider | None:
    key, base = _get(env, "LAYA_API_KEY"), _get(env, "LAYA_BASE_URL")
    return (
        LayaDecider(api_key=key, base_url=base, model=_get(env, "LAYA_MODEL"))
        if key and base
        else None
    )


def _xor(env: Env) -> HttpDecider | None:
    key, base = _get(env, "XOR_API_KEY"), _get(env, "XOR_BASE_URL")
    return (
        XorDecider(api_key=key, base_url=base, model=_get(env, "XOR_MODEL"))
        if key and base
        else None
    )


def _perplexity(env: Env) -> HttpDecider | None:
    key = _get(env, "PERPLEXITY_API_KEY")
    if not key:
        return None
    return PerplexityDecider(
        api_key=key,
        base_url=_get(env, "PERPLEXITY_DECIDER_BASE_URL"),
        model=_get(env, "PERPLEXITY_DECIDER_MODEL"),
    )


def _clef(env: Env) -> HttpDecider | None:
    key, account = _get(env, "CLOUDFLARE_API_KEY"), _get(env, "CLOUDFLARE_ACCOUNT_ID")
    if not (key and account):
        return None
    return ClefDecider(
        api_key=key,
        account_id=account,
        base_url=_get(env, "CLOUDFLARE_CLEF_BASE_URL"),
        model=_get(env, "CLOUDFLARE_CLEF_MODEL"),
    )


def _openai_decisions(env: Env) -> HttpDecider | None:
    key = _get(env, "OPENAI_API_KEY")
    if not key:
        return None
    return OpenAIDecisionsDecider(
        api_key=key,
        base_url=_get(env, "OPENAI_DECISIONS_BASE_URL"),
        model=_get(env, "OPENAI_DECISIONS_MODEL"),
    )


def _scaledown(env: Env) -> HttpDecider | None:
    key = _get(env, "SCALEDOWN_API_KEY")
    if not key:
        return None
    return ScaleDownDecider(api_key=key, base_url=_get(env, "SCALEDOWN_BASE_URL"))


def _logprob(env: Env) -> HttpDecider | None:
    base, model = _get(env, "TOOLROUTE_LOGPROB_BASE_URL"), _get(env, "TOOLROUTE_LOGPROB_MODEL")
    if not (base and model):
        return None
    return LogprobDecider(
        model=model, base_url=base, api_key=_get(env, "TOOLROUTE_LOGPROB_API_KEY")
    )


#: Tried in this order when no provider is named. OpenAI Decisions, ScaleDown
#: and the logprob decider are never picked implicitly: a plain OPENAI_API_KEY
#: must not start paying for decisions nobody asked for.
IMPLICIT: tuple[tuple[str, Callable[[Env], HttpDecider | None]], ...] = (
    ("typesafe", _typesafe),
    ("laya", _laya),
    ("xor", _xor),
    ("perplexity-decider", _perplexity),
    ("cloudflare-clef", _clef),
)
#: Names (and aliases) accepted in ``TOOLROUTE_DECISION_PROVIDER`` or ``provider=``.
EXPLICIT: dict[str, Callable[[Env], HttpDecider | None]] = {
    **dict(IMPLICIT),
    "jev": _typesafe,
    "typesafe-ai": _typesafe,
    "perplexity": _perplexity,
    "clef": _clef,
    # Explicit selection only, never in IMPLICIT.
    "openai-decisions": _openai_decisions,
    "scaledown": _scaledown,
    "logprob": _logprob,
}


def default_decider(
    provider: str | None = None, *, env: Mapping[str, str] | None = None
) -> HttpDecider | None:
    """The decision provider the environment configures, or ``None``.

    Args:
        provider: a provider name to use (``typesafe``, ``laya``, ``xor``,
            ``perplexity-decider``, ``cloudflare-clef``, ``openai-decisions``,
            ``scaledown``, ``logprob``); ``TOOLROUTE_DECISION_PROVIDER`` when
            ``None``; otherwise the first configured of TypeSafe
            (``TYPESAFE_API_KEY`` or ``AI_GATEWAY_API_KEY``), Laya, XOR,
            Perplexity and Clef.
        env: variables to read instead of ``os.environ``.

    Returns:
        A provider, or ``None`` when the named (or any) provider lacks its keys.

    Raises:
        ConfigError: an unknown provider name, or a configured base URL that
            breaks the URL rule.
    """
    env = os.environ if env is None else env
    name = provider or _get(env, "TOOLROUTE_DECISION_PROVIDER")
    if name is not None:
        build = EXPLICIT.get(name.strip().lower())
        if build is None:
            raise ConfigError(
                f"unknown decision provider {name!r}; expected one of {', '.join(sorted(EXPLICIT))}"
            )
        return build(env)
    for _name, build in IMPLICIT:
        decider = build(env)
        if decider is not None:
            return decider
    return None

"""Which decision provider the environment configures, in NeuroLink's order."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..._core.errors import ConfigError
from .local import LocalDecider
from .loop import HttpDecider
from .vendors.clef import ClefDecider
from .vendors.laya import LayaDecider
from .vendors.logprob import LogprobDecider
from .vendors.openai_decisions import OpenAIDecisionsDecider
from .vendors.perplexity import PerplexityDecider
from .vendors.scaledown import ScaleDownDecider
from .vendors.typesafe import TypeSafeDecider
from .vendors.xor import XorDecider

Env = Mapping[str, str]


def _get(env: Env, name: str) -> str | None:
    # A blank or whitespace-only value counts as absent.
    value = env.get(name, "").strip()
    return value or None


@attrs.frozen
class _Recipe:
    """How the environment builds one provider: ``build(env)``, ``None`` unless every
    variable of ``needs`` is set (each entry: one variable, or alternatives)."""

    build: Callable[[Env], HttpDecider | LocalDecider | None]
    needs: tuple[tuple[str, ...], ...] = ()

    def __call__(self, env: Env) -> HttpDecider | LocalDecider | None:
        return self.build(env)

    def unset(self, env: Env) -> list[str]:
        """The needed variables ``env`` lacks (``A or B`` for alternatives)."""
        return [" or ".join(alts) for alts in self.needs if not any(_get(env, a) for a in alts)]


def _build_typesafe(env: Env) -> HttpDecider | None:
    direct, gateway = _get(env, "TYPESAFE_API_KEY"), _get(env, "AI_GATEWAY_API_KEY")
    if not (direct or gateway):
        return None
    route: Any = _get(env, "TYPESAFE_TRANSPORT")
    base_variable = (
        "TYPESAFE_GATEWAY_URL" if route == "gateway" or not direct else "TYPESAFE_BASE_URL"
    )
    base = _get(env, base_variable)
    try:
        return TypeSafeDecider(
            api_key=direct,
            gateway_api_key=gateway,
            route=route,
            base_url=base,
            model=_get(env, "TYPESAFE_MODEL"),
        )
    except ConfigError as exc:
        variables = {
            "base_url": base_variable,
            "route": "TYPESAFE_TRANSPORT",
            "model": "TYPESAFE_MODEL",
        }
        raise _from_variables(exc, variables, env) from None


def _from_variables(exc: ConfigError, variables: Mapping[str, str], env: Env) -> ConfigError:
    """``exc`` naming the environment variable it came from (the argument its message names,
    else every variable that is set); values are never quoted, as they may hold secrets."""
    message = str(exc)
    named = [var for arg, var in variables.items() if arg.replace("_", " ") in message.lower()]
    named = named or [var for var in variables.values() if _get(env, var)]
    return ConfigError(f"{message} (from {' / '.join(named)})" if named else message)


_typesafe = _Recipe(_build_typesafe, (("TYPESAFE_API_KEY", "AI_GATEWAY_API_KEY"),))


def _from_env(
    cls: Callable[..., HttpDecider], required: Mapping[str, str], optional: Mapping[str, str]
) -> _Recipe:
    """A builder of ``cls`` from environment variables: ``{argument: variable}``; ``None``
    unless every required variable is set."""

    def build(env: Env) -> HttpDecider | None:
        needed = {arg: _get(env, var) for arg, var in required.items()}
        if not all(needed.values()):
            return None
        try:
            return cls(**needed, **{arg: _get(env, var) for arg, var in optional.items()})
        except ConfigError as exc:
            raise _from_variables(exc, {**required, **optional}, env) from None

    return _Recipe(build, tuple((var,) for var in required.values()))


_laya = _from_env(
    LayaDecider, {"api_key": "LAYA_API_KEY", "base_url": "LAYA_BASE_URL"}, {"model": "LAYA_MODEL"}
)
_xor = _from_env(
    XorDecider, {"api_key": "XOR_API_KEY", "base_url": "XOR_BASE_URL"}, {"model": "XOR_MODEL"}
)
_perplexity = _from_env(
    PerplexityDecider,
    {"api_key": "PERPLEXITY_API_KEY"},
    {"base_url": "PERPLEXITY_DECIDER_BASE_URL", "model": "PERPLEXITY_DECIDER_MODEL"},
)
_clef = _from_env(
    ClefDecider,
    {"api_key": "CLOUDFLARE_API_KEY", "account_id": "CLOUDFLARE_ACCOUNT_ID"},
    {"base_url": "CLOUDFLARE_CLEF_BASE_URL", "model": "CLOUDFLARE_CLEF_MODEL"},
)
_openai_decisions = _from_env(
    OpenAIDecisionsDecider,
    {"api_key": "OPENAI_API_KEY"},
    {"base_url": "OPENAI_DECISIONS_BASE_URL", "model": "OPENAI_DECISIONS_MODEL"},
)
_scaledown = _from_env(
    ScaleDownDecider, {"api_key": "SCALEDOWN_API_KEY"}, {"base_url": "SCALEDOWN_BASE_URL"}
)
_logprob = _from_env(
    LogprobDecider,
    {"base_url": "TOOLROUTE_LOGPROB_BASE_URL", "model": "TOOLROUTE_LOGPROB_MODEL"},
    {"api_key": "TOOLROUTE_LOGPROB_API_KEY"},
)


#: Tried in this order when no provider is named. OpenAI Decisions, ScaleDown
#: and the logprob decider are never picked implicitly: a plain OPENAI_API_KEY
#: must not start paying for decisions nobody asked for.
IMPLICIT: tuple[tuple[str, _Recipe], ...] = (
    ("typesafe", _typesafe),
    ("laya", _laya),
    ("xor", _xor),
    ("perplexity-decider", _perplexity),
    ("cloudflare-clef", _clef),
)
#: Names (and aliases) accepted in ``TOOLROUTE_DECISION_PROVIDER`` or ``provider=``.
EXPLICIT: dict[str, _Recipe] = {
    **dict(IMPLICIT),
    "jev": _typesafe,
    "typesafe-ai": _typesafe,
    "perplexity": _perplexity,
    "clef": _clef,
    # Explicit selection only, never in IMPLICIT.
    "openai-decisions": _openai_decisions,
    "scaledown": _scaledown,
    "logprob": _logprob,
    # Offline, no key: the bundled model, calibrated. Opt-in (see LocalDecider).
    "local": _Recipe(lambda _env: LocalDecider()),
}


def default_decider(
    provider: str | None = None, *, env: Mapping[str, str] | None = None
) -> HttpDecider | LocalDecider | None:
    """The decision provider the environment configures, or ``None``.

    Args:
        provider: a provider name to use (``typesafe``, ``laya``, ``xor``,
            ``perplexity-decider``, ``cloudflare-clef``, ``openai-decisions``,
            ``scaledown``, ``logprob``, ``local`` for the offline ``LocalDecider``);
            ``TOOLROUTE_DECISION_PROVIDER`` when
            ``None``; otherwise the first configured of TypeSafe
            (``TYPESAFE_API_KEY`` or ``AI_GATEWAY_API_KEY``), Laya, XOR,
            Perplexity and Clef.
        env: variables to read instead of ``os.environ``.

    Returns:
        A provider, or ``None`` when no provider is named and none is configured (then
        nothing is asked and every server is kept).

    Raises:
        ConfigError: an unknown provider name; a provider named (by ``provider`` or
            ``TOOLROUTE_DECISION_PROVIDER``) whose variables are not set, naming them: a
            provider asked for by name is never silently replaced by none; or a
            configured base URL that breaks the URL rule.
    """
    env = os.environ if env is None else env
    name = provider or _get(env, "TOOLROUTE_DECISION_PROVIDER")
    if name is not None:
        build = EXPLICIT.get(name.strip().lower())
        if build is None:
            source = "" if provider else " in TOOLROUTE_DECISION_PROVIDER"
            raise ConfigError(
                f"unknown decision provider {name!r}{source}; "
                f"expected one of {', '.join(sorted(EXPLICIT))}"
            )
        decider = build(env)
        if decider is None:
            source = "" if provider else " (from TOOLROUTE_DECISION_PROVIDER)"
            unset = " and ".join(build.unset(env)) or "its settings"
            raise ConfigError(
                f"decision provider {name.strip()!r}{source} is not configured: set {unset}"
            )
        return decider
    for _name, build in IMPLICIT:
        decider = build(env)
        if decider is not None:
            return decider
    return None

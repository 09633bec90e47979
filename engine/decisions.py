"""The decision API: typed questions about a state, calibrated answers, and their readers.

::

    from toolroute import decide
    from toolroute.decisions import BooleanQuestion, DecisionRequest, read_boolean

    request = DecisionRequest(state={...}, questions={"ok": BooleanQuestion("Is it safe?")})
    result = await decide(request, provider=decider)
"""

from ._core.decide.limits import DecisionLimits as DecisionLimits
from ._core.decide.limits import MediaLimits as MediaLimits
from ._core.decide.limits import ModelLimits as ModelLimits
from ._core.decide.limits import estimate_state_tokens as estimate_state_tokens
from ._core.decide.media import PreparedMedia as PreparedMedia
from ._core.decide.types import BooleanAnswer as BooleanAnswer
from ._core.decide.types import BooleanGate as BooleanGate
from ._core.decide.types import BooleanQuestion as BooleanQuestion
from ._core.decide.types import ChoiceAnswer as ChoiceAnswer
from ._core.decide.types import ChoiceQuestion as ChoiceQuestion
from ._core.decide.types import ChoiceReading as ChoiceReading
from ._core.decide.types import DecisionRequest as DecisionRequest
from ._core.decide.types import DecisionResult as DecisionResult
from ._core.decide.types import ScoreAnswer as ScoreAnswer
from ._core.decide.types import ScoreQuestion as ScoreQuestion
from ._core.decide.types import Usage as Usage
from ._core.decide.types import boolean_confidence as boolean_confidence
from ._core.decide.types import gate_boolean as gate_boolean
from ._core.decide.types import read_boolean as read_boolean
from ._core.decide.types import read_choice as read_choice
from ._core.decide.types import read_score as read_score
from ._core.errors import DecisionError as DecisionError
from ._core.errors import DecisionErrorKind as DecisionErrorKind
from ._core.public import publish as _publish
from ._runtime.stateless import decide as decide
from ._runtime.stateless import try_decide as try_decide

__all__ = [
    "BooleanAnswer",
    "BooleanGate",
    "BooleanQuestion",
    "ChoiceAnswer",
    "ChoiceQuestion",
    "ChoiceReading",
    "DecisionError",
    "DecisionErrorKind",
    "DecisionLimits",
    "DecisionRequest",
    "DecisionResult",
    "MediaLimits",
    "ModelLimits",
    "PreparedMedia",
    "ScoreAnswer",
    "ScoreQuestion",
    "Usage",
    "boolean_confidence",
    "decide",
    "estimate_state_tokens",
    "gate_boolean",
    "read_boolean",
    "read_choice",
    "read_score",
    "try_decide",
]

_publish(__name__, globals())

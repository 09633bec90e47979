"""The decision API: typed questions about a state, calibrated answers, and their readers.

::

    from toolroute import decide
    from toolroute.decisions import BooleanQuestion, DecisionRequest, read_boolean

    request = DecisionRequest(state={...}, questions={"ok": BooleanQuestion("Is it safe?")})
    result = await decide(request, provider=decider)
"""

from ._core.decision import BooleanAnswer as BooleanAnswer
from ._core.decision import BooleanGate as BooleanGate
from ._core.decision import BooleanQuestion as BooleanQuestion
from ._core.decision import ChoiceAnswer as ChoiceAnswer
from ._core.decision import ChoiceQuestion as ChoiceQuestion
from ._core.decision import ChoiceReading as ChoiceReading
from ._core.decision import DecisionRequest as DecisionRequest
from ._core.decision import DecisionResult as DecisionResult
from ._core.decision import ScoreAnswer as ScoreAnswer
from ._core.decision import ScoreQuestion as ScoreQuestion
from ._core.decision import Usage as Usage
from ._core.decision import boolean_confidence as boolean_confidence
from ._core.decision import gate_boolean as gate_boolean
from ._core.decision import read_boolean as read_boolean
from ._core.decision import read_choice as read_choice
from ._core.decision import read_score as read_score
from ._core.decision_limits import DecisionLimits as DecisionLimits
from ._core.decision_limits import MediaLimits as MediaLimits
from ._core.decision_limits import ModelLimits as ModelLimits
from ._core.decision_limits import estimate_state_tokens as estimate_state_tokens
from ._core.errors import DecisionError as DecisionError
from ._core.errors import DecisionErrorKind as DecisionErrorKind
from ._core.media import PreparedMedia as PreparedMedia
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

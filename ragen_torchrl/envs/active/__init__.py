"""Active-reasoning environments for the T3 tasks: the env wrapper, the reply parser and the five tasks.

The env rules are in :mod:`.reasoning`; :mod:`.env` is the chat env over an interactive game core,
:mod:`.reply` parses ``<think>``/``<interact>``/``<answer>`` replies and :mod:`.tasks` binds the games.
"""

from .reasoning import (
    ACTIVE_FORMAT_INSTRUCTIONS,
    INVALID_REPLY,
    INVALID_REPLY_END,
    LAST_TURN_PROMPT,
    MALFORMED_MODES,
    ActiveReasoningEnv,
    ActiveReply,
    CircuitDecodingEnv,
    GuessNumbersEnv,
    MovieRecommendationEnv,
    PreferenceEstimationEnv,
    SituationPuzzlesEnv,
    parse_active_reply,
)

__all__ = [
    "ActiveReasoningEnv",
    "ActiveReply",
    "CircuitDecodingEnv",
    "GuessNumbersEnv",
    "MovieRecommendationEnv",
    "PreferenceEstimationEnv",
    "SituationPuzzlesEnv",
    "ACTIVE_FORMAT_INSTRUCTIONS",
    "INVALID_REPLY",
    "INVALID_REPLY_END",
    "LAST_TURN_PROMPT",
    "MALFORMED_MODES",
    "parse_active_reply",
]

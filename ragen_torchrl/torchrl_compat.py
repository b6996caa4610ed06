"""The private parts of torchrl 0.14 this package uses, in one place.

torchrl's LLM stack keeps a few things we need out of its public API: the chat-template table and
the model-family keywords behind ``History.apply_chat_template``, and the helper its wrappers use
to cut the assistant replies out of full histories. Importing them here, and only here (a test in
``tests/test_layers.py`` checks no other module imports a private torchrl name), means the next
torchrl release that moves one breaks this file and its test, not the code that uses them.

Each name is checked against torchrl at import: a missing one raises an ``ImportError`` naming
torchrl's version and the supported range, instead of an ``AttributeError`` somewhere in a rollout.

Example:
    >>> "chatml_format" in CHAT_TEMPLATES
    True
    >>> callable(extract_responses_from_full_histories)
    True
"""

from __future__ import annotations

import torchrl

__all__ = ["CHAT_TEMPLATES", "CUSTOM_MODEL_FAMILY_KEYWORDS", "extract_responses_from_full_histories"]

#: the torchrl releases this module is written against (pyproject pins the same range)
SUPPORTED = ">=0.14,<0.15"

try:
    # the chat templates torchrl renders by name (History.apply_chat_template(chat_template_name=...))
    from torchrl.data.llm.history import _CHAT_TEMPLATES as CHAT_TEMPLATES

    # model-family keywords torchrl maps to its own templates (a tokenizer named after one has its parser)
    from torchrl.data.llm.history import _CUSTOM_MODEL_FAMILY_KEYWORDS as CUSTOM_MODEL_FAMILY_KEYWORDS

    # the reply of each row cut out of its full history (what TransformersWrapper/vLLMWrapper return)
    from torchrl.modules.llm.policies.common import (
        _extract_responses_from_full_histories as extract_responses_from_full_histories,
    )
except ImportError as e:  # pragma: no cover - only on a torchrl outside the supported range
    raise ImportError(
        f"ragen_torchrl needs torchrl {SUPPORTED}; torchrl {torchrl.__version__} does not have {e.name or e}: "
        "pip install 'torchrl>=0.14,<0.15'"
    ) from e

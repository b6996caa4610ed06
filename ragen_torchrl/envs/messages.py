"""Conversions between a torchrl ``History`` conversation and ``(role, content)`` pairs.

The env reads the policy's conversation as plain pairs (whatever the ``History`` holds: random
spec data may carry ``None`` fields, read as ``""``) and writes the next prompt back as a
``History``.

Example:
    >>> from torchrl.data.llm import History
    >>> h = messages_history([("system", "rules"), ("user", "hi")])
    >>> history_messages(h)
    [('system', 'rules'), ('user', 'hi')]
"""

from __future__ import annotations

from torchrl.data.llm import History

__all__ = ["chat_dicts", "history_messages", "messages_history"]


def history_messages(history: History) -> list[tuple[str, str]]:
    """``(role, content)`` pairs of one conversation; ``None`` (random spec data) reads as ``""``."""
    roles = history.get("role", None)
    contents = history.get("content", None)
    n = history.batch_size[0] if history.batch_dims else 0
    roles = list(roles) if roles is not None else [None] * n
    contents = list(contents) if contents is not None else [None] * n
    return [(r if isinstance(r, str) else "", c if isinstance(c, str) else "") for r, c in zip(roles, contents)]


def messages_history(messages: list[tuple[str, str]]) -> History:
    """A ``History`` of ``len(messages)`` messages (role and content)."""
    return History(role=[r for r, _ in messages], content=[c for _, c in messages], batch_size=(len(messages),))


def chat_dicts(history: History) -> list[list[dict]]:
    """A ``[B, messages]`` History as one list of message dicts per row (what a tokenizer's chat
    template takes), without the ``"<none>"`` messages that pad ragged rows.

    Example:
        >>> import torch
        >>> rows = [messages_history([("user", "hi")]), messages_history([("user", "a"), ("assistant", "b")])]
        >>> rows[0] = rows[0].extend(History(role="<none>", content="", batch_size=(1,)), inplace=False)
        >>> [[m["role"] for m in row] for row in chat_dicts(torch.stack(rows))]
        [['user'], ['user', 'assistant']]
    """
    return [[m for m in row if m["role"] != "<none>"] for row in history.tolist(tolist_first=True)]

"""A model dir's chat template is code from elsewhere: it is rendered once under a time limit at load time.

Transformers renders chat templates in Jinja's sandbox, which blocks attribute access and caps one
``range()`` at 100,000 items, but bounds neither the steps nor the time of a render: two nested
loops of 10^5 make a 10^10-step template that hangs every rollout. :func:`check_chat_template`
renders probe conversations (one, two and four turns, with and without the generation prompt)
through the tokenizer's own ``apply_chat_template`` and stops the render once it has run
``timeout`` seconds (:func:`call_with_deadline`: a trace function that checks the clock on every
line of the compiled template and on every Python call); a template that does not finish is
refused with :class:`ChatTemplateError` naming the model. A template that fails on a probe (it
raises, or wants arguments the probe lacks) is left to fail where it is used, as before.

The probe catches templates that loop whatever the conversation; a template that loops only on
some input is not detected by it.

Example:
    >>> class Tokenizer:                       # apply_chat_template as transformers calls it
    ...     chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    ...     def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
    ...         from jinja2.sandbox import ImmutableSandboxedEnvironment
    ...         return ImmutableSandboxedEnvironment().from_string(self.chat_template).render(messages=messages)
    >>> check_chat_template(Tokenizer(), "my-model")
    >>> slow = Tokenizer()
    >>> slow.chat_template = "{% for i in range(99999) %}{% for j in range(99999) %}.{% endfor %}{% endfor %}"
    >>> try:
    ...     check_chat_template(slow, "my-model", timeout=0.2)
    ... except ChatTemplateError as e:
    ...     print(e)
    my-model: the chat template did not finish rendering a 1-turn probe conversation within 0.2 s (a template that loops this long would hang every rollout); fix or replace its chat_template
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["PROBE_TIMEOUT", "ChatTemplateError", "DeadlineExceeded", "call_with_deadline", "check_chat_template"]

#: seconds one probe render may take (a real template renders a probe in milliseconds)
PROBE_TIMEOUT = 5.0

# Jinja compiles a template loaded from a string to Python code with this file name
_TEMPLATE_FILE = "<template>"


class ChatTemplateError(ValueError):
    """A chat template that does not finish rendering a probe conversation in time; names the model."""


class DeadlineExceeded(RuntimeError):
    """Raised inside a call that ran past its deadline (see :func:`call_with_deadline`)."""


def call_with_deadline(fn: Callable[..., Any], timeout: float, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` stopped with :class:`DeadlineExceeded` once it has run ``timeout`` seconds.

    The clock is checked on every Python call and on every line of Jinja-compiled template code
    while ``fn`` runs (in this thread); a single long C call (one huge string multiplication) is
    not interrupted. The trace function in place before is restored afterwards.

    Example:
        >>> call_with_deadline(sum, 1.0, [1, 2, 3])
        6
        >>> def spin():
        ...     while True:
        ...         abs(1)          # any Python-level call lets the clock be checked
        ...         (lambda: 0)()
        >>> try:
        ...     call_with_deadline(spin, 0.05)
        ... except DeadlineExceeded:
        ...     print("stopped")
        stopped
    """
    deadline = time.monotonic() + float(timeout)

    def check() -> None:
        if time.monotonic() > deadline:
            raise DeadlineExceeded(f"ran past {timeout:g} s")

    def local(frame, event, arg):
        if event == "line":
            check()
        return local

    def tracer(frame, event, arg):
        check()
        return local if frame.f_code.co_filename == _TEMPLATE_FILE else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        return fn(*args, **kwargs)
    finally:
        sys.settrace(previous)


def _probes() -> list[list[dict[str, str]]]:
    system = {"role": "system", "content": "You are a helpful agent."}
    turns = [
        {"role": "user", "content": "The board:\nP _ G\nYour move?"},
        {"role": "assistant", "content": "<think>go right</think><answer>Right</answer>"},
    ]
    return [
        [turns[0]],
        [system, *turns, {"role": "user", "content": "Your move?"}],
        [system, *(turns * 4)],
    ]


def check_chat_template(tokenizer: Any, where: str, timeout: float | None = None) -> None:
    """Render probe conversations with ``tokenizer.apply_chat_template`` under ``timeout`` seconds each
    (default :data:`PROBE_TIMEOUT`); a render that does not finish raises :class:`ChatTemplateError`
    naming ``where``.

    A tokenizer (or processor) without a chat template, or one whose template raises on a probe, passes.
    See the module example.
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return
    timeout = PROBE_TIMEOUT if timeout is None else float(timeout)
    for messages in _probes():
        for prompt in (False, True):
            try:
                call_with_deadline(
                    tokenizer.apply_chat_template, timeout, messages, tokenize=False, add_generation_prompt=prompt
                )
            except DeadlineExceeded:
                turns = sum(m["role"] == "user" for m in messages)
                raise ChatTemplateError(
                    f"{where}: the chat template did not finish rendering a {turns}-turn probe conversation "
                    f"within {timeout:g} s (a template that loops this long would hang every rollout); "
                    "fix or replace its chat_template"
                ) from None
            except Exception:  # noqa: BLE001 - a template that fails on the probe fails where it is used
                continue

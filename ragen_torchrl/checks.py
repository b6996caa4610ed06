"""Small checks for plain argument values: ints, numbers, booleans and choices.

One home for the type/range checks that constructors and config readers repeat
(``isinstance(x, bool) or not isinstance(x, int) or x < 1``, ``math.isfinite``, ...).
Each check returns the value (a number as ``float``) or raises :class:`ValueError`
naming the parameter and the bad value, in the form ``"<name> must be <what>, got <value!r>"``.

* :func:`check_int`: an ``int`` (``bool`` is rejected: ``true`` in a YAML file is not ``1``),
  optionally within ``[minimum, maximum]``;
* :func:`check_number`: an ``int`` or ``float`` (not ``bool``), finite unless ``finite=False``,
  optionally within ``[minimum, maximum]``; returned as ``float``;
* :func:`check_bool`: ``True`` or ``False`` only;
* :func:`check_choice`: one of a fixed set of options.

``expected`` (and ``message`` for :func:`check_choice`) lets a caller keep a message of its
own wording ("a positive integer", "unknown metric ..."), so that replacing a hand-rolled
check changes no error text. ``error`` (:func:`check_bool`, :func:`check_choice`) is the
exception type raised, ``ValueError`` or a subclass: the config checks'
:func:`~ragen_torchrl.trainer.config_checks.check_bool` / ``check_choice`` read a config key and
call these with ``error=ConfigError``, so a key's value is checked by one definition.

Examples:
    >>> check_int("buckets", 6, minimum=1)
    6
    >>> check_int("filter.grad_snr.buckets", 0, minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: filter.grad_snr.buckets must be an int >= 1, got 0
    >>> check_int("every", True, minimum=0)
    Traceback (most recent call last):
    ...
    ValueError: every must be an int >= 0, got True
    >>> check_int("max_turn", 0, minimum=1, expected="a positive integer")
    Traceback (most recent call last):
    ...
    ValueError: max_turn must be a positive integer, got 0
    >>> check_number("eps", 1)
    1.0
    >>> check_number("threshold", float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: threshold must be finite, got nan
    >>> check_bool("enabled", "yes")
    Traceback (most recent call last):
    ...
    ValueError: enabled must be true or false, got 'yes'
    >>> check_choice("mode", "max", ("min", "max"))
    'max'
    >>> check_choice("mode", "mean", ("min", "max"))
    Traceback (most recent call last):
    ...
    ValueError: mode must be one of min, max, got 'mean'
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

__all__ = ["UNKNOWN_OPTION", "check_bool", "check_choice", "check_int", "check_number"]

#: the ``check_choice`` message of option-like keys (filter strategies, stop-rule modes)
UNKNOWN_OPTION = "unknown {name} {value!r}; valid options: {choices}"


def _bounds(minimum: Any, maximum: Any) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    noun: str = "an int",
    expected: str | None = None,
) -> int:
    """``value`` if it is an ``int`` (not ``bool``) in ``[minimum, maximum]``; else ``ValueError``.

    Args:
        name: the parameter or config key named in the message.
        value: the value to check.
        minimum, maximum: inclusive bounds (``None``: unbounded).
        noun: how the message names the type (``"an int"``, ``"an integer"``).
        expected: the whole "must be ..." text, replacing ``noun`` and the bounds.

    Raises:
        ValueError: ``"<name> must be an int >= <minimum>, got <value!r>"`` (or ``expected``).

    Examples:
        >>> check_int("patience", 3, minimum=1, maximum=5)
        3
        >>> check_int("patience", 2.0, minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: patience must be an int >= 1, got 2.0
        >>> check_int("k", 9, minimum=1, maximum=5, noun="an integer")
        Traceback (most recent call last):
        ...
        ValueError: k must be an integer in [1, 5], got 9
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        what = expected if expected is not None else noun + _bounds(minimum, maximum)
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    finite: bool = True,
    expected: str | None = None,
) -> float:
    """``value`` as a ``float`` if it is an ``int``/``float`` (not ``bool``), finite and in range.

    Messages (``value`` is shown after conversion to ``float`` once it is a number):
    ``"<name> must be a number, got ..."``, ``"<name> must be finite, got nan"``,
    ``"<name> must be >= <minimum>, got ..."`` (``<= <maximum>``, ``in [<minimum>, <maximum>]``);
    with ``expected`` every failure reads ``"<name> must be <expected>, got <value!r>"``.
    With ``finite=False`` NaN and infinities pass (NaN then fails any bound).

    Examples:
        >>> check_number("ratio", 3, minimum=0.0)
        3.0
        >>> check_number("ratio", -1, minimum=0.0)
        Traceback (most recent call last):
        ...
        ValueError: ratio must be >= 0.0, got -1.0
        >>> check_number("ratio", True)
        Traceback (most recent call last):
        ...
        ValueError: ratio must be a number, got True
        >>> check_number("p", 2, minimum=0, maximum=1, expected="in [0, 1]")
        Traceback (most recent call last):
        ...
        ValueError: p must be in [0, 1], got 2
        >>> check_number("x", float("inf"), finite=False)
        inf
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be {expected or 'a number'}, got {value!r}")
    got = float(value)
    shown = value if expected is not None else got
    if finite and not math.isfinite(got):
        raise ValueError(f"{name} must be {expected or 'finite'}, got {shown!r}")
    if (minimum is not None and not got >= minimum) or (maximum is not None and not got <= maximum):
        what = expected if expected is not None else _bounds(minimum, maximum).lstrip()
        raise ValueError(f"{name} must be {what}, got {shown!r}")
    return got


def check_bool(name: str, value: Any, *, error: type[ValueError] = ValueError) -> bool:
    """``value`` if it is ``True`` or ``False`` (not ``0``/``1``/``"yes"``); else ``error`` (``ValueError``).

    Examples:
        >>> check_bool("enabled", False)
        False
        >>> check_bool("enabled", 1)
        Traceback (most recent call last):
        ...
        ValueError: enabled must be true or false, got 1
    """
    if not isinstance(value, bool):
        raise error(f"{name} must be true or false, got {value!r}")
    return value


def check_choice(
    name: str,
    value: Any,
    choices: Collection[Any],
    *,
    message: str | None = None,
    error: type[ValueError] = ValueError,
) -> Any:
    """``value`` if it is one of ``choices``; else ``error`` (``ValueError``).

    Args:
        name: the parameter or config key named in the message.
        value: the value to check.
        choices: the valid options (listed in the message, joined by ``", "``).
        message: a ``str.format`` template for the error, with the fields ``{name}``,
            ``{value}`` (use ``{value!r}``) and ``{choices}`` (the joined options);
            default ``"{name} must be one of {choices}, got {value!r}"``.
        error: the exception type raised (``ValueError`` or a subclass).

    Examples:
        >>> check_choice("metric", "variance", ("rv", "mi"), message="unknown {name} {value!r}; valid options: {choices}")
        Traceback (most recent call last):
        ...
        ValueError: unknown metric 'variance'; valid options: rv, mi
    """
    if value not in choices:
        template = message if message is not None else "{name} must be one of {choices}, got {value!r}"
        listed = ", ".join(str(c) for c in choices)
        raise error(template.format(name=name, value=value, choices=listed))
    return value

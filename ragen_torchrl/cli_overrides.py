"""The ``-o/--override KEY=VALUE`` alias that ``ragen-eval`` and ``ragen-experiment`` keep for one release.

Both take bare Hydra-style overrides (``ragen-eval RUN key=value``); the old ``-o`` spelling still
works and prints a deprecation warning that shows the bare command.

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="ragen-x")
    >>> add_deprecated_override_option(p)
    >>> p.parse_args(["-o", "a.b=1"]).override
    ['a.b=1']
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["add_deprecated_override_option", "warn_deprecated_overrides"]


def add_deprecated_override_option(parser: argparse.ArgumentParser) -> None:
    """Add ``-o/--override KEY=VALUE`` (repeatable, into ``args.override``) to ``parser``."""
    parser.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="deprecated (goes in the next release): write the override bare, KEY=VALUE",
    )


def warn_deprecated_overrides(prog: str, head: str, overrides: Sequence[str]) -> None:
    """Print the deprecation warning for ``-o`` overrides (nothing when there are none).

    ``head``: what comes before the overrides in the bare command (``NAME``, ``RUN``).

    Example:
        >>> warn_deprecated_overrides("ragen-eval", "RUN", ["a=1"])  # doctest: +SKIP
        ragen-eval: warning: -o/--override is deprecated ...; write the overrides bare: ragen-eval RUN a=1
    """
    if overrides:
        print(
            f"{prog}: warning: -o/--override is deprecated and goes in the next release; "
            f"write the overrides bare: {prog} {head} {' '.join(overrides)}",
            file=sys.stderr,
            flush=True,
        )

"""Countdown as a TorchRL chat environment.

The rules and scoring live in :class:`~ragen_torchrl.envs.games.countdown.CountdownGame`
(pure Python); :class:`CountdownEnv` is the batched
:class:`~ragen_torchrl.envs.text_env.TextGameEnv` around it. One turn: the whole text
inside ``<answer>`` is the equation (free-form, ``action_names is None``); an equation
that does not parse scores 0 and a reply without an ``<answer>`` block gets the format
penalty. The game never raises on model text.

Problems come from a generator (3 or 4 numbers, a reachable target) or from a JSON-lines
/ parquet file (``data_path``; records ``{"target": 24, "nums": [3, 4, 6]}``).

Train/validation split (see :mod:`ragen_torchrl.envs.splits`): a problem is a
validation problem when the hash of ``target|sorted numbers`` falls in the lowest
``val_fraction`` of the hash range (for a file: the ``ceil(val_fraction * n)`` smallest
hashes). Validation seeds (``[2**30, 2**31)``) get validation problems, every other seed
training problems. With ``val_data_path`` the file at ``data_path`` is used whole for
training and the other whole for validation.

Example:
    >>> import tensordict
    >>> tensordict.set_list_to_stack(True).set()
    >>> from torchrl.data.llm import History
    >>> env = CountdownEnv(num_envs=1)
    >>> _ = env.set_seed(0)
    >>> td = env.reset()  # a training level drawn from the env's generator
    >>> answer = env.games[0].oracle_action()
    >>> reply = History(role="assistant", content=env.format_reply("solve", [answer]), batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> out["reward"].item(), out["done"].item(), out["success"].item()
    (1.0, True, True)
"""

from __future__ import annotations

import functools
import os
import random
from typing import Any

from ..checks import check_int
from .games.base import TextGame
from .games.countdown import CountdownGame, CountdownProblem, load_countdown_file
from .splits import check_data_paths, check_val_fraction, data_pools, draw_in_split, file_stamp, level_split
from .text_env import TextGameEnv

__all__ = ["CountdownEnv", "CountdownGame"]

SYSTEM_FORMAT = "Reply <think>reasoning</think><answer>equation</answer>."


def _problem_key(target: int, numbers) -> str:
    # the order of the numbers does not make a different problem
    return f"{int(target)}|{sorted(int(n) for n in numbers)}"


@functools.lru_cache(maxsize=8)
def _load(path: str, stamp: tuple[int, int] | None) -> tuple[CountdownProblem, ...]:
    # cached: the trainer builds a training and a validation env from the same config;
    # the file's mtime/size in the key reloads it after an edit
    return tuple(load_countdown_file(path))


def load_problems(path: str | os.PathLike) -> tuple[CountdownProblem, ...]:
    """Countdown problems of a file (cached per path and modification time).

    Raises:
        ValueError: missing file or malformed record (the message names the file, the
            line and the expected fields ``target`` and ``nums``).

    Example:
        >>> import json, tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        ...     _ = f.write(json.dumps({"target": 24, "nums": [3, 4, 6]}) + "\\n")
        >>> load_problems(f.name)
        (CountdownProblem(target=24, numbers=(3, 4, 6)),)
    """
    path = os.path.expanduser(os.fspath(path))
    return _load(path, file_stamp(path))


class CountdownEnv(TextGameEnv):
    """Batched Countdown chat env (one turn).

    Args:
        num_envs: batch size.
        data_path: JSON-lines / parquet file of problems (``target`` and ``nums``), or
            ``None`` to generate problems.
        val_data_path: optional separate validation file (then ``data_path`` is all
            training data and ``val_fraction`` is ignored).
        val_fraction: share of the problems held out for validation (see the module
            docstring); 0 turns the content split off (then splits differ by seed only,
            and for a file both splits use all records).
        num_numbers: numbers per generated problem (``None``: 3 or 4 at random).
        max_number: generated numbers are drawn from ``1..max_number``.
        max_target: generated targets are at most this.
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv`
            (defaults: ``max_turn=1``, ``max_actions_per_turn=1``, ``max_actions_per_traj=1``).

    Example:
        >>> env = CountdownEnv(num_envs=4, num_numbers=3)
        >>> len(env.game_factory(5, 0).numbers)
        3
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        num_numbers: int | None = None,
        max_number: int = 99,
        max_target: int = 1000,
        data_path: str | os.PathLike | None = None,
        val_data_path: str | os.PathLike | None = None,
        val_fraction: float = 0.1,
        **kwargs: Any,
    ) -> None:
        data_path, val_data_path = check_data_paths(data_path, val_data_path)
        check_val_fraction(val_fraction)
        if num_numbers is not None:
            num_numbers = check_int("num_numbers", num_numbers, minimum=2, noun="an integer")
        max_number = check_int("max_number", max_number, minimum=1, noun="an integer")
        max_target = check_int("max_target", max_target, minimum=1, noun="an integer")
        kwargs.setdefault("max_turn", 1)
        kwargs.setdefault("max_actions_per_turn", 1)
        kwargs.setdefault("max_actions_per_traj", 1)
        kwargs.setdefault("system_prompt", f"{CountdownGame.instructions} {SYSTEM_FORMAT}")
        self.data_path, self.val_data_path, self.val_fraction = data_path, val_data_path, float(val_fraction)

        pools = data_pools(load_problems, data_path, val_data_path, lambda p: _problem_key(*p), self.val_fraction)
        self.problems = pools

        def generate(seed: int) -> CountdownGame:
            return CountdownGame.generate(seed, num_numbers=num_numbers, max_number=max_number, max_target=max_target)

        def factory(level_seed: int, sample: int) -> CountdownGame:
            # one deterministic answer check: the sample seed is not needed
            if pools is None:
                return draw_in_split(
                    generate, lambda g: _problem_key(g.target, g.numbers), level_seed, self.val_fraction
                )
            return CountdownGame.from_problems(pools[level_split(level_seed)], level_seed)

        super().__init__(factory, num_envs=num_envs, **kwargs)

    def demo_turn(
        self, game: TextGame, rng: random.Random, noise: float, actions_left: int, noise_kind: str = "heuristic"
    ) -> tuple[str, bool, int]:
        """One demonstration answer: the solver's equation, or with probability ``noise``
        a wrong one that uses every number once in random order with random operators
        (mostly the 0.1 "right numbers, wrong value" case), so the warm-started policy is
        not already perfect."""
        assert isinstance(game, CountdownGame)
        answer = game.oracle_action()
        if rng.random() < noise:
            nums = list(game.numbers)
            rng.shuffle(nums)
            answer = str(nums[0])
            for n in nums[1:]:
                answer += f" {rng.choice('+-*')} {n}"
        think = game.explain(answer)
        _, done, _ = game.step(answer)
        return self.format_reply(think, [answer]), done, 1

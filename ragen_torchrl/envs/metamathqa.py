"""MetaMathQA as a TorchRL chat environment.

The rules live in :class:`~ragen_torchrl.envs.games.metamathqa.MetaMathQAGame` (pure
Python); :class:`MetaMathQAEnv` is the batched
:class:`~ragen_torchrl.envs.text_env.TextGameEnv` around it. The text inside
``<answer>`` is the answer (free-form, ``action_names is None``), compared with the
reference by normalised exact match. A wrong answer is answered "Incorrect. Please think
again." and the episode goes on; a right answer at attempt k (0-based) earns ``1 / 2**k``;
up to ``max_turn`` (5) attempts.

Data: ``data_path`` is a local ``.jsonl`` / ``.json`` / ``.parquet`` file (records
``{"query": ..., "response": "... The answer is: 42"}`` as in MetaMathQA, or
``{"question": ..., "answer": ...}``) or a hub dataset name (needs the ``datasets``
package and network). **Without data** (``data_path: null``, the default) the env uses
the game core's synthetic arithmetic questions, so ``ragen-train env=metamathqa`` runs
offline; those are a smoke test of the pipeline, not the MetaMathQA benchmark.

Train/validation split (see :mod:`ragen_torchrl.envs.splits`): a question is a
validation question when the hash of its normalised text falls in the lowest
``val_fraction`` of the hash range (for a file: the ``ceil(val_fraction * n)`` smallest
hashes). Validation seeds (``[2**30, 2**31)``) get validation questions, every other seed
training ones. With ``val_data_path`` the two files are used whole for each split.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = MetaMathQAEnv(num_envs=1)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> wrong = History(role="assistant", content="<think>guess</think><answer>-1</answer>", batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(wrong.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> out["reward"].item(), out["done"].item(), out["history", "prompt"][0].content[-1]
    (0.0, False, 'Incorrect. Please think again.')
"""

from __future__ import annotations

import functools
import os
import random
import re
from fractions import Fraction
from typing import Any

from ..checks import check_int
from .games.base import TextGame
from .games.metamathqa import MathProblem, MetaMathQAGame, load_metamathqa
from .splits import check_data_paths, check_val_fraction, data_pools, draw_in_split, file_stamp, level_split
from .text_env import TextGameEnv

__all__ = ["MetaMathQAEnv", "MetaMathQAGame", "load_problems"]

SYSTEM_FORMAT = "Reply <think>reasoning</think><answer>final answer</answer>."
#: answers longer than this are wrong without being parsed: a model can emit thousands
#: of digits, and Python refuses to convert integers of more than 4300 digits
MAX_ANSWER_CHARS = 1000


class _ModelFacingGame(MetaMathQAGame):
    """:class:`MetaMathQAGame` whose ``step`` never raises on model text: an overlong or
    unparsable answer counts as a wrong, ineffective attempt."""

    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        if not isinstance(action, str) or len(action) > MAX_ANSWER_CHARS:
            action = ""
        try:
            return super().step(action)
        except (ValueError, OverflowError, RecursionError):
            # the core compares before it changes any state, so the attempt is still unused
            return super().step("")


def _question_key(question: str) -> str:
    # the same question with other spacing or case is the same problem
    return re.sub(r"\s+", " ", question).strip().lower()


@functools.lru_cache(maxsize=8)
def _load(
    path_or_name: str, stamp: tuple[int, int] | None, hub_split: str, limit: int | None
) -> tuple[MathProblem, ...]:
    # cached: the trainer builds a training and a validation env from the same config;
    # the file's mtime/size in the key reloads it after an edit
    return tuple(load_metamathqa(path_or_name, split=hub_split, limit=limit))


def load_problems(
    path_or_name: str | os.PathLike, hub_split: str = "train", limit: int | None = None
) -> tuple[MathProblem, ...]:
    """MetaMathQA problems of a local file or hub dataset (cached per path and modification time).

    Raises:
        ValueError: missing local file or malformed record (the message names the file,
            the line and the expected fields).
        ImportError: a hub name without the ``datasets`` package.

    Example:
        >>> import json, tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        ...     _ = f.write(json.dumps({"query": "What is 2 + 2?", "response": "2 + 2 = 4. The answer is: 4"}) + "\\n")
        >>> load_problems(f.name)
        (MathProblem(question='What is 2 + 2?', answer='4'),)
    """
    src = os.fspath(path_or_name)
    return _load(src, file_stamp(src), hub_split, limit)


class MetaMathQAEnv(TextGameEnv):
    """Batched MetaMathQA chat env (up to ``max_turn`` answer attempts).

    Args:
        num_envs: batch size.
        data_path: local ``.jsonl``/``.json``/``.parquet`` file or hub dataset name;
            ``None`` = synthetic arithmetic questions (offline smoke runs).
        val_data_path: optional separate validation file/dataset (then ``data_path`` is
            all training data and ``val_fraction`` is ignored).
        val_fraction: share of the questions held out for validation; 0 turns the
            content split off (for a file both splits then use all records).
        hub_split: split of a hub dataset (ignored for local files).
        limit: keep at most this many records of each file (``None``: all).
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv`
            (defaults: ``max_turn=5``, ``max_actions_per_turn=1``, ``max_actions_per_traj=5``);
            the game allows ``max_turn`` attempts.

    Example:
        >>> env = MetaMathQAEnv(num_envs=2, max_turn=3)
        >>> env.game_factory(4, 0).max_attempts
        3
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        data_path: str | os.PathLike | None = None,
        val_data_path: str | os.PathLike | None = None,
        val_fraction: float = 0.1,
        hub_split: str = "train",
        limit: int | None = None,
        **kwargs: Any,
    ) -> None:
        data_path, val_data_path = check_data_paths(
            data_path, val_data_path, accepts="a file path, a hub dataset name", training="the training data"
        )
        check_val_fraction(val_fraction)
        if limit is not None:
            check_int("limit", limit, minimum=1, expected="a positive integer or null")
        if not isinstance(hub_split, str) or not hub_split:
            raise ValueError(f"hub_split must be a non-empty string, got {hub_split!r}")
        kwargs.setdefault("max_turn", 5)
        kwargs.setdefault("max_actions_per_turn", 1)
        kwargs.setdefault("max_actions_per_traj", kwargs["max_turn"])
        max_attempts = kwargs["max_turn"]
        check_int("max_turn", max_attempts, minimum=1, expected="a positive integer")
        instructions = MetaMathQAGame.instructions if max_attempts > 1 else MetaMathQAGame.single_attempt_instructions
        kwargs.setdefault("system_prompt", f"{instructions} {SYSTEM_FORMAT}")
        self.data_path, self.val_data_path, self.val_fraction = data_path, val_data_path, float(val_fraction)

        pools = data_pools(
            lambda path: load_problems(path, hub_split, limit),
            data_path,
            val_data_path,
            lambda p: _question_key(p.question),
            self.val_fraction,
        )
        self.problems = pools

        def generate(seed: int) -> MetaMathQAGame:
            return _ModelFacingGame.generate(seed, max_attempts=max_attempts)

        def factory(level_seed: int, sample: int) -> MetaMathQAGame:
            # deterministic answer checks: the sample seed is not needed
            if pools is None:
                return draw_in_split(generate, lambda g: _question_key(g.question), level_seed, self.val_fraction)
            return _ModelFacingGame.from_problems(pools[level_split(level_seed)], level_seed, max_attempts=max_attempts)

        super().__init__(factory, num_envs=num_envs, **kwargs)

    @property
    def demo_revision(self) -> int:
        """The version of this env's demonstrations, part of the warm start's cache key
        (:func:`~ragen_torchrl.trainer.sft.warm_start`): 1 with one attempt, whose only demonstrated attempt
        may be a guess (:meth:`demo_turn`); 0, which leaves the key without a version, with several."""
        return 1 if self.max_turn == 1 else 0

    def demo_turn(
        self, game: TextGame, rng: random.Random, noise: float, actions_left: int, noise_kind: str = "heuristic"
    ) -> tuple[str, bool, int]:
        """One demonstration attempt: the reference answer with its worked solution, or with probability
        ``noise`` (for numeric answers) a guess: a nearby wrong number. With several attempts the guess is
        never on the last one, so the demonstrations show recovering after "Incorrect. Please think
        again."; with one attempt (``env=arithmetic``) the only attempt may be a guess, as a noisy
        demonstration in the other envs plays a non-optimal action."""
        assert isinstance(game, MetaMathQAGame)
        answer = game.oracle_action()
        if rng.random() < noise and (game.max_attempts == 1 or game.attempt < game.max_attempts - 1):
            try:
                value = Fraction(answer.replace(",", ""))
            except (ValueError, ZeroDivisionError):
                value = None
            if value is not None and value.denominator == 1:
                answer = str(value.numerator + rng.choice((-10, -2, -1, 1, 2, 10)))
        think = game.explain(answer)
        _, done, _ = game.step(answer)
        return self.format_reply(think, [answer]), done, 1

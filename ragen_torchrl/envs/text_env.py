"""A batched TorchRL chat environment over pure-Python game cores.

:class:`TextGameEnv` is a :class:`torchrl.envs.llm.ChatEnv` in history mode. Each row of
the batch is one episode of a :class:`~ragen_torchrl.envs.games.base.TextGame`. The env
parses the last assistant message, applies the actions, appends the next observation as a
user message and writes the keys of the TensorDict contract (``docs/tensordict_contract.md``).

Shapes (B = rows of the TensorDict passed in; torchrl's LLM-env conventions, declared in
:mod:`ragen_torchrl.envs.specs`): the conversation ``("history", "prompt")`` is B x messages (the
policy writes ``("history", "full")``, the action); ``reward`` is ``(B, 1, 1)``; ``done`` /
``terminated`` / ``truncated`` are ``(B, 1)`` (``done = terminated | truncated``: terminated when
the game ended, truncated when the turn or action budget ran out first); every other per-row key
(``level_seed``, ``group_id``, ``sample_seed``, ``env_index``, ``turn``, ``progress``,
``success``, ``action_is_valid``, ``action_is_effective``) is ``(B,)``.

Levels: a reset with ``level_seed`` entries (one per row; optional ``group_id``, default 0,
and ``sample_seed``, default the row index) plays those levels: that is how a trainer
puts the G samples of a group on the same level. A reset without them (``env.reset()``,
and torchrl's automatic reset of finished rows in ``env.rollout(...,
break_when_any_done=False)`` or ``LLMCollector``) draws a new training level per restarted
row from an env-owned generator (seeded by ``env.set_seed(seed)``; seed 0 until then) and
gives it a new ``group_id`` (a counter, so ids never repeat). A reset with a ``"_reset"``
mask of shape ``(B, 1)`` restarts only the masked rows; the others keep their episode.

Rows are addressed by ``env_index``: the env is not batch-locked, so a rollout can step
only the rows that are still running (a sub-TensorDict carrying their ``env_index``).
That keeps every generation batch uniform in its number of messages.

``step`` accepts any ``History`` the action spec can produce: a missing or non-string
role/content reads as an empty message (the reply is then malformed).

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from ragen_torchrl.envs import make_env
    >>> env = make_env("frozenlake", num_envs=2)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([3, 3]), group_id=torch.tensor([0, 0]), batch_size=[2]))
    >>> list(td["history", "prompt"][0].role)
    ['system', 'user']
    >>> _ = env.set_seed(0)
    >>> td = env.reset()  # levels drawn from the env's generator
    >>> td["group_id"].tolist(), td["done"].shape
    ([0, 1], torch.Size([2, 1]))
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack
from torchrl.data.llm import History
from torchrl.envs import TransformedEnv
from torchrl.envs.llm import ChatEnv

from ragen_torchrl.checks import check_choice

from ..keys import (
    ACTION_IS_EFFECTIVE,
    ACTION_IS_VALID,
    DONE,
    ENV_INDEX,
    GROUP_ID,
    HISTORY_FULL,
    HISTORY_PROMPT,
    LEVEL_SEED,
    PROGRESS,
    RESET,
    REWARD,
    SAMPLE_SEED,
    SUCCESS,
    TERMINATED,
    TRUNCATED,
    TURN,
)
from .games.base import TextGame
from .messages import history_messages, messages_history
from .parsing import MAX_REPLY_CHARS, REPLY_FORMATS, parse_response
from .specs import declare_text_env_specs
from .splits import VAL_SEED_OFFSET

logger = logging.getLogger(__name__)

#: next user message of a row whose step raised (the row ends there; see ``TextGameEnv``)
ENV_ERROR_MESSAGE = "The environment could not process this reply; the episode is over."

FORMAT_INSTRUCTIONS = "Reply <think>reasoning</think><answer>action</answer>, up to {max_actions} actions split by ||."


#: kinds of demonstration noise (see :meth:`TextGameEnv.demo_turn`)
NOISE_KINDS = ("uniform", "heuristic")


class TextGameEnv(ChatEnv):
    """Batched multi-turn chat env over :class:`TextGame` cores.

    Args:
        game_factory: ``game_factory(level_seed, sample_seed) -> TextGame``. Rows with the
            same ``level_seed`` get the same level; a game may use ``sample_seed`` to vary
            stochastic outcomes between the G samples of a group (Bandit payouts do;
            FrozenLake slips follow the level seed by default).
        num_envs: batch size B used for specs (rows are addressed by ``env_index``).
        max_turn: turns per episode before truncation.
        max_actions_per_turn: action tokens read from one reply: the valid ones among the
            first ``max_actions_per_turn`` run in order, an invalid one takes its slot.
        max_actions_per_traj: actions per episode before truncation (executed actions
            count; a reply is cut to the actions left).
        format_penalty: added once to a turn's reward when the reply is malformed, has no
            valid action (state unchanged) or has any invalid action among the tokens read
            (the valid ones still run): ``"Fly || Up || Left"`` moves Up and adds it.
        reply_format: ``"strict"`` (default, the RAGEN reference: only whitespace between
            ``</think>`` and ``<answer>``) or ``"lenient"`` (any answer block after the think
            block); see :mod:`ragen_torchrl.envs.parsing`.
        system_prompt: overrides the default (game instructions + format rules).
        device: device of the reward/done tensors.

    Input of ``reset`` (all optional): ``level_seed``, ``group_id``, ``sample_seed`` (B, long)
    and a ``"_reset"`` mask (B, 1); without ``level_seed`` the levels are drawn from the
    generator seeded by ``env.set_seed`` (see the module docstring).

    Hostile replies: every reply is cut to
    :data:`~ragen_torchrl.envs.parsing.MAX_REPLY_CHARS` (8192) characters before any parser or
    game sees it, and a non-string reply counts as empty. Parsers and games treat any string
    as a possibly malformed reply (penalty, state unchanged) and never raise; a reply that
    still makes a row's step raise (or return a non-finite reward) is a bug in the env, but
    the rollout survives it: the exception is logged as a warning naming the env, the row's
    ``level_seed`` and the exception, the row ends there (``done`` and ``terminated``, no
    success) with ``format_penalty`` as its reward, and the other rows go on
    (``env_error_count`` counts such rows).
    """

    def __init__(
        self,
        game_factory: Callable[[int, int], TextGame],
        *,
        num_envs: int = 1,
        max_turn: int = 5,
        max_actions_per_turn: int = 2,
        max_actions_per_traj: int = 10,
        format_penalty: float = -0.1,
        reply_format: str = "strict",
        system_prompt: str | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if reply_format not in REPLY_FORMATS:
            raise ValueError(f"reply_format must be one of {', '.join(REPLY_FORMATS)}, got {reply_format!r}")
        for name, value in (
            ("num_envs", num_envs),
            ("max_turn", max_turn),
            ("max_actions_per_turn", max_actions_per_turn),
            ("max_actions_per_traj", max_actions_per_traj),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.game_factory = game_factory
        self.max_turn = max_turn
        self.max_actions_per_turn = max_actions_per_turn
        self.max_actions_per_traj = max_actions_per_traj
        self.format_penalty = float(format_penalty)
        self.reply_format = reply_format
        probe = game_factory(0, 0)
        if system_prompt is None:
            system_prompt = probe.instructions + " " + FORMAT_INSTRUCTIONS.format(max_actions=max_actions_per_turn)
        super().__init__(batch_size=(num_envs,), system_prompt=system_prompt, input_mode="history", device=device)
        # rows are addressed by env_index, so sub-batches of running rows can be stepped
        self._batch_locked = False
        self.games: list[TextGame] = []
        self._turns: list[int] = []
        self._actions_used: list[int] = []
        self._level_seeds: list[int] = []
        self._group_ids: list[int] = []
        self._sample_seeds: list[int] = []
        # levels of resets without level_seed entries: deterministic until env.set_seed
        self._set_seed(0)
        #: rows ended by the safety net since construction (a trainer may log it as a metric)
        self.env_error_count = 0

    # -- specs ------------------------------------------------------------------
    def _make_specs(self) -> None:
        super()._make_specs()
        declare_text_env_specs(self)

    # -- helpers ----------------------------------------------------------------
    @staticmethod
    def _user_message(content: str) -> History:
        return History(role="user", content=content, batch_size=(1,))

    def observation_text(self, game: TextGame, prefix: str = "") -> str:
        """The user message for a game state (override to change the rendering)."""
        return f"{prefix}{game.render_text()}"

    def feedback_prefix(self, game: TextGame) -> str:
        """Text put before the observation after a valid turn (e.g. a game's feedback)."""
        return ""

    def format_reply(self, think: str, actions: list[str]) -> str:
        """An assistant reply in this env's format (used by demonstrations)."""
        return f"<think>{think}</think><answer>{' || '.join(actions)}</answer>"

    def demo_turn(
        self, game: TextGame, rng: random.Random, noise: float, actions_left: int, noise_kind: str = "heuristic"
    ) -> tuple[str, bool, int]:
        """Play one demonstration turn on ``game``; return ``(reply, game_over, actions_used)``.

        Each action is the oracle's, except with probability ``noise`` a non-optimal one:
        ``noise_kind="heuristic"`` takes the game's biased ``greedy_action`` when it has one
        (e.g. FrozenLake's hole-blind walk to the goal), which shifts the most likely action
        in the states where the heuristic is wrong; ``"uniform"`` (and games without a
        heuristic) take a uniformly random action, which keeps the oracle's action the most
        likely one but flattens the policy. Free-form games (``action_names is None``)
        answer once per turn with the oracle. Override for other reply formats (accept and
        ignore ``noise_kind`` if it does not apply).
        """
        check_choice("noise_kind", noise_kind, NOISE_KINDS)
        k = rng.randint(1, self.max_actions_per_turn) if game.action_names else 1
        actions, reasons, done = [], [], False
        for _ in range(min(k, actions_left)):
            action = game.oracle_action()
            if game.action_names and rng.random() < noise:
                if noise_kind == "heuristic" and hasattr(game, "greedy_action"):
                    action = game.greedy_action()
                else:
                    action = rng.choice(list(game.action_names))
            reasons.append(game.explain(action))
            actions.append(action)
            _, done, _ = game.step(action)
            if done:
                break
        return self.format_reply(" ".join(reasons), actions), done, len(actions)

    # -- reset/step ---------------------------------------------------------------
    def _reset_rows(self, tensordict: TensorDictBase | None) -> list[int]:
        """Rows to (re)start: those of the ``"_reset"`` mask, else all (all on the first reset)."""
        n = self.batch_size[0]
        mask = None if tensordict is None else tensordict.get(RESET, None)
        if mask is None or len(self.games) != n:
            return list(range(n))
        return mask.reshape(n, -1).any(-1).nonzero().reshape(-1).tolist()

    def _level_selection(self, tensordict: TensorDictBase | None, rows: list[int]) -> tuple[list, list, list]:
        """``(level_seeds, group_ids, sample_seeds)`` of ``rows``: the input's, or drawn.

        Explicit ``level_seed`` entries (one per env row) are used as given, with ``group_id``
        (default 0) and ``sample_seed`` (default: the row index) as today. Without them
        (``env.reset()``, torchrl's auto-reset of finished rows) every restarted row gets a
        new training level drawn from the env's generator (seeded by ``env.set_seed``) and a
        new group id of its own.
        """
        n = self.batch_size[0]
        given = None if tensordict is None else tensordict.get(LEVEL_SEED, None)
        if given is None:
            levels = [self._rng.randrange(VAL_SEED_OFFSET) for _ in rows]
            groups = list(range(self._next_group_id, self._next_group_id + len(rows)))
            self._next_group_id += len(rows)
            return levels, groups, list(rows)
        given = given.reshape(-1).tolist()
        if len(given) != n:
            raise RuntimeError(f"{type(self).__name__}.reset needs one level_seed per env row ({n}), got {len(given)}")
        groups = tensordict.get(GROUP_ID, None)
        groups = [0] * n if groups is None else groups.reshape(-1).tolist()
        samples = tensordict.get(SAMPLE_SEED, None)
        samples = list(range(n)) if samples is None else samples.reshape(-1).tolist()
        return [int(given[i]) for i in rows], [int(groups[i]) for i in rows], [int(samples[i]) for i in rows]

    def _initial_prompt(self, game: TextGame) -> History:
        return History.from_chats(
            [
                [
                    {"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": self.observation_text(game)},
                ]
            ]
        )[0]

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        n = self.batch_size[0]
        rows = self._reset_rows(tensordict)
        levels, groups, samples = self._level_selection(tensordict, rows)
        if len(self.games) != n:
            self.games = [None] * n
            self._turns, self._actions_used = [0] * n, [0] * n
            self._level_seeds, self._group_ids, self._sample_seeds = [0] * n, [0] * n, [0] * n
        for i, level, group, sample in zip(rows, levels, groups, samples):
            self.games[i] = self.game_factory(level, sample)
            self._level_seeds[i], self._group_ids[i], self._sample_seeds[i] = level, group, sample
            self._turns[i] = self._actions_used[i] = 0
        # Every row is written (torchrl merges a partial reset with the "_reset" mask); a row
        # that keeps running gets a placeholder built from its current state, which the merge
        # drops.
        out = TensorDict(
            {
                LEVEL_SEED: torch.tensor(self._level_seeds, dtype=torch.long),
                GROUP_ID: torch.tensor(self._group_ids, dtype=torch.long),
                SAMPLE_SEED: torch.tensor(self._sample_seeds, dtype=torch.long),
                ENV_INDEX: torch.arange(n),
                TURN: torch.tensor(self._turns, dtype=torch.long),
                PROGRESS: torch.tensor([g.progress() for g in self.games], dtype=torch.float32),
                SUCCESS: torch.zeros(n, dtype=torch.bool),
                ACTION_IS_VALID: torch.ones(n, dtype=torch.bool),
                ACTION_IS_EFFECTIVE: torch.zeros(n, dtype=torch.bool),
                DONE: torch.zeros(n, 1, dtype=torch.bool),
                TERMINATED: torch.zeros(n, 1, dtype=torch.bool),
                TRUNCATED: torch.zeros(n, 1, dtype=torch.bool),
            },
            batch_size=[n],
            device=self.device,
        ).to_lazystack(0)
        out.set(HISTORY_PROMPT, lazy_stack([self._initial_prompt(g) for g in self.games]))
        return out

    #: per-row step outputs besides the contract's done flags: key -> (dtype, default).
    #: ``action_is_valid`` is True for a turn without format penalty (every token read was
    #: a valid action); ``action_is_effective`` when an executed action changed the state.
    STEP_FIELDS: dict[str, tuple[torch.dtype, Any]] = {
        SUCCESS: (torch.bool, False),
        ACTION_IS_VALID: (torch.bool, False),
        ACTION_IS_EFFECTIVE: (torch.bool, False),
    }

    def _apply_reply(self, idx: int, game: TextGame, reply: str) -> tuple[float, bool, dict[str, Any], str]:
        """Apply one row's reply; return ``(reward, finished, fields, prefix)``.

        ``fields`` fills :attr:`STEP_FIELDS`; ``prefix`` goes before the next observation.
        Subclasses with another reply format override this (and :meth:`_out_of_budget`).
        """
        parsed = parse_response(reply, game.action_names, self.max_actions_per_turn, reply_format=self.reply_format)
        budget = self.max_actions_per_traj - self._actions_used[idx]
        actions = parsed.actions[: max(budget, 0)]
        if not actions:
            return self.format_penalty, False, {}, "Invalid reply.\n"
        # reference rule (RAGEN-2 envs): the valid actions among the first
        # max_actions_per_turn tokens run in order; one penalty per turn if any was invalid
        start = self.format_penalty if parsed.penalised else 0.0
        reward, finished, fields, _ = self._run_actions(idx, game, actions, start)
        fields[ACTION_IS_VALID] = not parsed.penalised
        return reward, finished, fields, self.feedback_prefix(game)

    def _run_actions(
        self, idx: int, game: TextGame, actions: list[str], reward: float = 0.0, accept=None
    ) -> tuple[float, bool, dict[str, Any], int]:
        """Step ``game`` with ``actions`` in order until it finishes; ``(reward, finished, fields, rejected)``.

        ``reward`` is the starting value the step rewards add to. ``accept(action)``, when given, is
        asked before each action (the game state may have changed since the last one): a refused
        action is skipped and counted in ``rejected``. ``fields`` holds ``action_is_effective`` and,
        when the game finished, ``success``.
        """
        finished, rejected = False, 0
        fields: dict[str, Any] = {ACTION_IS_EFFECTIVE: False}
        for action in actions:
            if accept is not None and not accept(action):
                rejected += 1
                continue
            r, finished, info = game.step(action)
            reward += r
            self._actions_used[idx] += 1
            fields[ACTION_IS_EFFECTIVE] |= bool(info.get("action_is_effective", False))
            if finished:
                fields[SUCCESS] = bool(info.get("success", False))
                break
        return reward, finished, fields, rejected

    def _out_of_budget(self, idx: int) -> bool:
        return self._turns[idx] >= self.max_turn or self._actions_used[idx] >= self.max_actions_per_traj

    def _step_row(self, idx: int, reply: str) -> tuple[dict[str, Any], str]:
        """Step one row; return its per-key values and the next user message."""
        game = self.games[idx]
        reward, finished, fields, prefix = self._apply_reply(idx, game, reply)
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"non-finite reward {reward} from {type(game).__name__}")
        self._turns[idx] += 1
        out_of_budget = self._out_of_budget(idx)
        row = {
            REWARD: reward,
            TERMINATED: bool(finished),
            TRUNCATED: out_of_budget and not finished,
            DONE: bool(finished) or out_of_budget,
            TURN: self._turns[idx],
            PROGRESS: float(game.progress()),
        }
        for key, (_, default) in self.STEP_FIELDS.items():
            row[key] = fields.get(key, default)
        return row, self.observation_text(game, prefix)

    def _failed_row(self, idx: int, reply: str, error: Exception) -> tuple[dict[str, Any], str]:
        """The safety net: a row whose step raised ends with the format penalty."""
        seed = self._level_seeds[idx] if idx < len(self._level_seeds) else None
        logger.warning(
            "%s: env error on row %d (level_seed=%s, reply of %d chars): %s: %s; the row ends "
            "with the format penalty %g and the rollout goes on",
            type(self).__name__,
            idx,
            seed,
            len(reply),
            type(error).__name__,
            error,
            self.format_penalty,
            exc_info=error,
        )
        self.env_error_count += 1
        self._turns[idx] += 1
        try:
            progress = float(self.games[idx].progress())
        except Exception:  # the game's state may be half-updated: any progress will do
            progress = 0.0
        row = {key: default for key, (_, default) in self.STEP_FIELDS.items()}
        row.update(
            {
                REWARD: self.format_penalty,
                TERMINATED: True,
                TRUNCATED: False,
                DONE: True,
                TURN: self._turns[idx],
                PROGRESS: progress if math.isfinite(progress) else 0.0,
            }
        )
        return row, ENV_ERROR_MESSAGE

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        full: History = tensordict.get(HISTORY_FULL)
        env_index = tensordict.get(ENV_INDEX).reshape(-1).tolist()
        # any History the action spec can produce: missing optional fields, None roles/contents
        conversations = [history_messages(h) for h in full.unbind(0)]
        replies = [msgs[-1][1] if msgs and msgs[-1][0] == "assistant" else "" for msgs in conversations]
        # bound the work on runaway generations before any parser or game sees the text
        replies = [r[:MAX_REPLY_CHARS] if isinstance(r, str) else "" for r in replies]
        n = len(env_index)
        values: dict[str, list] = {
            key: [] for key in (REWARD, DONE, TERMINATED, TRUNCATED, TURN, PROGRESS, *self.STEP_FIELDS)
        }
        new_msgs = []
        for idx, reply in zip(env_index, replies):
            turns = self._turns[idx]
            try:
                row, message = self._step_row(idx, reply)
            except Exception as error:  # a bug in the env must not end the training run
                self._turns[idx] = turns  # _failed_row counts the turn once
                row, message = self._failed_row(idx, reply, error)
            for key in values:
                values[key].append(row[key])
            new_msgs.append(message)
        next_prompt = lazy_stack(
            [messages_history(msgs + [("user", message)]) for msgs, message in zip(conversations, new_msgs)]
        )
        data = {key: torch.tensor(values[key], dtype=dtype) for key, (dtype, _) in self.STEP_FIELDS.items()}
        rows = torch.tensor(env_index, dtype=torch.long)
        data.update(
            {
                LEVEL_SEED: torch.tensor(self._level_seeds, dtype=torch.long)[rows],
                GROUP_ID: torch.tensor(self._group_ids, dtype=torch.long)[rows],
                SAMPLE_SEED: torch.tensor(self._sample_seeds, dtype=torch.long)[rows],
                ENV_INDEX: rows,
                TURN: torch.tensor(values[TURN], dtype=torch.long),
                PROGRESS: torch.tensor(values[PROGRESS], dtype=torch.float32),
                # torchrl's LLM convention: reward has two more dims than the batch
                REWARD: torch.tensor(values[REWARD], dtype=torch.float32).reshape(n, 1, 1),
                **{k: torch.tensor(values[k], dtype=torch.bool).reshape(n, 1) for k in (DONE, TERMINATED, TRUNCATED)},
            }
        )
        out = TensorDict(data, batch_size=[n], device=self.device).to_lazystack(0)
        out.set(HISTORY_PROMPT, next_prompt)
        return out

    def _assert_tensordict_shape(self, tensordict: TensorDictBase) -> None:
        # step() may receive any subset of the rows (addressed by env_index); the base
        # check (batch == env.batch_size) would reject a sub-batch of running rows
        if tensordict.batch_dims != 1 or tensordict.batch_size[0] > self.batch_size[0]:
            super()._assert_tensordict_shape(tensordict)

    def _step_proc_data(self, next_tensordict_out: TensorDictBase) -> TensorDictBase:
        # _step writes reward (n, 1, 1) and done/terminated/truncated (n, 1) for its n rows;
        # the base class would reshape them to the full (num_envs, ...) spec shapes, which
        # fails for a sub-batch
        return next_tensordict_out

    def _set_seed(self, seed: int | None) -> None:
        # seeds the generator of the levels drawn by a reset without level_seed entries
        self._seed = seed
        self._rng = random.Random(seed)
        self._next_group_id = 0


def sample_seed(level_seed: int, sample: int) -> int:
    """Deterministic per-sample seed for stochastic dynamics inside one prompt group."""
    return random.Random(level_seed * 1_000_003 + sample).getrandbits(31)


class RowTransformedEnv(TransformedEnv):
    """A ``TransformedEnv`` whose base env accepts sub-batches of rows (addressed by ``env_index``).

    ``TransformedEnv`` inherits ``EnvBase``'s check that a step input has the full batch size and
    reshapes rewards to the full spec shape; the row-addressed envs override both, but a
    ``TransformedEnv`` does not consult its base env for them. This subclass delegates the two
    hooks to the base env, so a rollout can step only its running rows through transforms.

    Example:
        >>> from ragen_torchrl.envs import make_env
        >>> from ragen_torchrl.transforms import T3Truncation
        >>> env = RowTransformedEnv(make_env("guess_numbers", num_envs=4), T3Truncation())
        >>> env.batch_locked
        False
    """

    def _assert_tensordict_shape(self, tensordict: TensorDictBase) -> None:
        self.base_env._assert_tensordict_shape(tensordict)

    def _step_proc_data(self, next_tensordict_out: TensorDictBase) -> TensorDictBase:
        return self.base_env._step_proc_data(next_tensordict_out)

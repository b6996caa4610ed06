"""The active-reasoning chat environment over an interactive game core (the T3 tasks' base).

:class:`ActiveReasoningEnv` maps a reply (:mod:`.reply`) to the game core's
``step("interact:" + query)`` / ``step("answer:" + answer)``, shows the game's feedback at the
top of the next user message and writes the per-turn T3 keys; the rules are described in
:mod:`ragen_torchrl.envs.active`. The tasks themselves (GuessNumbers, ...) are in
:mod:`.tasks`.

Example:
    >>> MALFORMED_MODES
    ('auto', 'end', 'retry', 'penalty')
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Composite, Unbounded

from ...checks import check_choice
from ...keys import (
    ACTION_IS_EFFECTIVE,
    ACTION_IS_VALID,
    GUESS_IN_PREVIOUS_HYPOTHESES,
    HYPOTHESIS_SIZE,
    IS_ANSWER,
    IS_QUERY,
    PROGRESS,
    PROGRESS_BEFORE,
    SUCCESS,
)
from ..games.interactive import InteractiveGame
from ..text_env import TextGameEnv
from .reply import (
    ACTIVE_FORMAT_INSTRUCTIONS,
    INVALID_REPLY,
    INVALID_REPLY_END,
    LAST_TURN_PROMPT,
    parse_active_reply,
)

__all__ = ["ActiveReasoningEnv", "MALFORMED_MODES"]


#: what a malformed reply (no ``<interact>``/``<answer>`` block) does: ``"auto"`` (default, the
#: reference code): ``"end"`` while a T3 truncation transform is active (T3 on, training), else
#: ``"retry"``; ``"end"``: the episode ends with reward 0; ``"retry"``: :data:`INVALID_REPLY`
#: ("... Try again.") and the episode goes on, no penalty; ``"penalty"``: ``format_penalty`` and
#: the episode goes on
MALFORMED_MODES = ("auto", "end", "retry", "penalty")


class ActiveReasoningEnv(TextGameEnv):
    """Batched chat env over an :class:`~ragen_torchrl.envs.games.guess_numbers.InteractiveGame`.

    Args:
        game_factory: ``game_factory(level_seed, sample_seed) -> InteractiveGame``; the game's
            ``max_turns`` should equal ``max_turn`` (it is shown to the model and drives the
            demonstrator's decision to answer). The subclasses pass it through.
        num_envs: batch size B.
        max_turn: turns per episode (queries + answer + malformed replies).
        malformed: what a reply without an ``<interact>``/``<answer>`` block does
            (:data:`MALFORMED_MODES`). ``"auto"`` (default, the T3 reference code): with a T3
            truncation transform active (T3 on, training; it sets :attr:`t3_active`) the episode
            ends with reward 0; otherwise (no T3, and always in validation) the next message is
            :data:`~ragen_torchrl.envs.active.reply.INVALID_REPLY` ("... Try again.") and the
            episode goes on with no penalty. ``"end"`` / ``"retry"`` force one behaviour;
            ``"penalty"``: ``format_penalty`` and the episode goes on. A malformed reply that
            does not end the episode still uses a turn.
        format_penalty: reward of a malformed reply with ``malformed="penalty"`` (−0.1), and, in
            every mode, of a row whose step raised (the env ends that row; see
            :class:`~ragen_torchrl.envs.text_env.TextGameEnv`).
        require_think: a reply without ``</think>`` is a format error (default False: the
            reference looks only for the action block).
        noise_repeat: in demonstrations, share of noisy queries that repeat an earlier query
            (a belief-trap action); the rest are random queries (:meth:`random_query`).
        system_prompt: overrides :data:`ACTIVE_FORMAT_INSTRUCTIONS`.
        device: device of the reward/done tensors.

    Input of ``reset``: as :class:`~ragen_torchrl.envs.text_env.TextGameEnv` (``level_seed``,
    ``group_id``, ``sample_seed`` -- unused: the T3 games are deterministic given the level --,
    all optional, and a ``"_reset"`` mask). ``step`` accepts any subset of rows, addressed by
    ``env_index``.

    Example:
        >>> from ragen_torchrl.envs.games.guess_numbers import GuessNumbersGame
        >>> env = ActiveReasoningEnv(lambda seed, sample: GuessNumbersGame.generate(seed, max_turns=3),
        ...                          num_envs=2, max_turn=3)
        >>> env.format_reply("guess", ["interact:0123"])
        '<think>guess</think><interact>0123</interact>'
    """

    #: T3 task name of the game (``t3_rules.make_rule``); set by the subclasses
    task_name: str = ""
    #: a T3 truncation transform is active on this env (set by
    #: :class:`~ragen_torchrl.transforms.t3.T3Truncation`); decides ``malformed="auto"``
    t3_active: bool = False

    def __init__(
        self,
        game_factory: Callable[[int, int], InteractiveGame],
        *,
        num_envs: int = 1,
        max_turn: int = 10,
        malformed: str = "auto",
        format_penalty: float = -0.1,
        require_think: bool = False,
        noise_repeat: float = 0.5,
        system_prompt: str | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if not 0.0 <= float(noise_repeat) <= 1.0:
            raise ValueError(f"noise_repeat must be in [0, 1], got {noise_repeat}")
        check_choice("malformed", malformed, MALFORMED_MODES)
        self.malformed = malformed
        self.require_think = bool(require_think)
        self.noise_repeat = float(noise_repeat)
        super().__init__(
            game_factory,
            num_envs=num_envs,
            max_turn=max_turn,
            # one query or answer per turn; the turn limit is the only budget
            max_actions_per_turn=1,
            max_actions_per_traj=max_turn if isinstance(max_turn, int) else 1,
            format_penalty=format_penalty,
            system_prompt=ACTIVE_FORMAT_INSTRUCTIONS if system_prompt is None else system_prompt,
            device=device,
        )
        self.last_infos: list[dict[str, Any]] = []

    # -- specs ------------------------------------------------------------------
    def _make_specs(self) -> None:
        super()._make_specs()
        shape = self.batch_size
        self.full_observation_spec.update(
            Composite(
                progress_before=Unbounded(shape=shape, dtype=torch.float32),
                hypothesis_size=Unbounded(shape=shape, dtype=torch.float32),
                guess_in_previous_hypotheses=Bounded(0, 1, shape=shape, dtype=torch.bool),
                is_query=Bounded(0, 1, shape=shape, dtype=torch.bool),
                is_answer=Bounded(0, 1, shape=shape, dtype=torch.bool),
                shape=shape,
            )
        )

    # -- rendering hooks ----------------------------------------------------------
    def observation_text(self, game: InteractiveGame, prefix: str = "") -> str:
        """Full task text before the first turn; afterwards ``prefix`` + turns left, and
        :data:`LAST_TURN_PROMPT` when one turn is left (the reference asks for the answer then)."""
        if game.turn == 0:
            text = f"{prefix}{game.render_text()}"
        else:
            text = f"{prefix}Turns left: {game.turns_left}."
        if game.turns_left == 1 and not game.done:
            text += f"\n{LAST_TURN_PROMPT}"
        return text

    def feedback_prefix(self, game: InteractiveGame) -> str:
        """The game's feedback on the last query (``info["feedback"]``)."""
        return f"Feedback: {game.last_feedback}\n"

    def format_reply(self, think: str, actions: list[str]) -> str:
        """``<think>…</think><interact>q</interact>`` or ``…<answer>a</answer>`` for the first action
        (``"interact:q"`` / ``"answer:a"``; an action without a prefix is an answer)."""
        kind, payload = InteractiveGame.split_action(actions[0]) if actions else ("answer", "")
        tag = "interact" if kind == "interact" else "answer"
        return f"<think>{think}</think><{tag}>{payload}</{tag}>"

    # -- demonstrations -----------------------------------------------------------
    def random_query(self, game: InteractiveGame, rng: random.Random) -> str | None:
        """A random (usually uninformative) query for noisy demonstrations; ``None`` = none."""
        return None

    def noisy_query(self, game: InteractiveGame, rng: random.Random, oracle_query: str) -> str:
        """A non-optimal query: an earlier query repeated (probability ``noise_repeat``) or a
        random one; falls back to ``oracle_query``."""
        earlier = [q for q, fb in game.transcript if not q.startswith("ANSWER ") and not fb.startswith("Invalid")]
        if earlier and rng.random() < self.noise_repeat:
            return rng.choice(earlier)
        query = self.random_query(game, rng)
        return oracle_query if query is None else query

    def demo_action(self, game: InteractiveGame, rng: random.Random, off_oracle: bool) -> str:
        """The demonstrator's action (default: ``game.oracle_action()``). ``off_oracle`` tells
        that a noisy query was made earlier in the episode (subclasses may switch to a cheaper
        demonstrator then)."""
        return game.oracle_action()

    def demo_turn(
        self, game: InteractiveGame, rng: random.Random, noise: float, actions_left: int, noise_kind: str = "heuristic"
    ) -> tuple[str, bool, int]:
        """One demonstration turn: the demonstrator's query or answer (:meth:`demo_action`); with
        probability ``noise`` a query is replaced by :meth:`noisy_query` (answers never are)."""
        off_oracle = bool(getattr(game, "_demo_off_oracle", False))
        action = self.demo_action(game, rng, off_oracle)
        kind, payload = game.split_action(action)
        if kind == "interact" and rng.random() < noise:
            action = game.INTERACT_PREFIX + self.noisy_query(game, rng, payload)
            game._demo_off_oracle = True  # the history has left the oracle's decision tree
        think = game.explain(action)
        _, done, _ = game.step(action)
        return self.format_reply(think, [action]), done, 1

    # -- reset/step -----------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        rows = self._reset_rows(tensordict)
        out = super()._reset(tensordict, **kwargs)
        n = len(self.games)
        if len(self.last_infos) != n:
            self.last_infos = [{} for _ in range(n)]
        for i in rows:
            self.last_infos[i] = {}
        progress = out.get(PROGRESS)
        out.set(PROGRESS_BEFORE, progress.clone())
        out.set(HYPOTHESIS_SIZE, torch.tensor([self._hypothesis_size(g, {}) for g in self.games]))
        out.set(GUESS_IN_PREVIOUS_HYPOTHESES, torch.ones(n, dtype=torch.bool))
        out.set(IS_QUERY, torch.zeros(n, dtype=torch.bool))
        out.set(IS_ANSWER, torch.zeros(n, dtype=torch.bool))
        return out

    @staticmethod
    def _hypothesis_size(game: InteractiveGame, info: dict[str, Any]) -> float:
        size = info.get("hypothesis_size", getattr(game, "hypothesis_size", None))
        return float(size) if isinstance(size, (int, float)) else -1.0

    STEP_FIELDS = {
        **TextGameEnv.STEP_FIELDS,
        PROGRESS_BEFORE: (torch.float32, 0.0),
        HYPOTHESIS_SIZE: (torch.float32, -1.0),
        GUESS_IN_PREVIOUS_HYPOTHESES: (torch.bool, True),
        IS_QUERY: (torch.bool, False),
        IS_ANSWER: (torch.bool, False),
    }

    def malformed_mode(self) -> str:
        """What a malformed reply does now: ``malformed``, with ``"auto"`` resolved by
        :attr:`t3_active` (``"end"`` with T3 truncation active, else ``"retry"``).

        Example:
            >>> from ragen_torchrl.envs.games.guess_numbers import GuessNumbersGame
            >>> env = ActiveReasoningEnv(lambda seed, sample: GuessNumbersGame.generate(seed), num_envs=1)
            >>> env.malformed_mode()
            'retry'
            >>> env.t3_active = True
            >>> env.malformed_mode()
            'end'
        """
        if self.malformed == "auto":
            return "end" if self.t3_active else "retry"
        return self.malformed

    def _apply_reply(self, idx: int, game: InteractiveGame, reply: str):
        parsed = parse_active_reply(reply, require_think=self.require_think)
        if parsed.kind is None:
            # the game's own invalid action: uses the turn, changes nothing else
            _, finished, info = game.step("")
            mode = self.malformed_mode()
            if mode == "end":
                # reference code with T3 on, in training: the episode ends, unrewarded
                game.done = True
                reward, finished, fields = 0.0, True, {SUCCESS: False}
                prefix = INVALID_REPLY_END + "\n"
            else:
                reward = self.format_penalty if mode == "penalty" else 0.0
                prefix, fields = INVALID_REPLY + "\n", {}
        else:
            reward, finished, info = game.step(parsed.as_action())
            prefix = self.feedback_prefix(game)
            fields = {
                ACTION_IS_VALID: bool(info.get("valid", False)),
                IS_QUERY: parsed.kind == "interact",
                IS_ANSWER: parsed.kind == "answer",
            }
            if finished:
                fields[SUCCESS] = bool(info.get("success", False))
        self.last_infos[idx] = info
        self._actions_used[idx] += 1
        # the game's info dict uses the same names as the step keys
        fields.update(
            {
                ACTION_IS_EFFECTIVE: bool(info.get("action_is_effective", False)),
                GUESS_IN_PREVIOUS_HYPOTHESES: info.get("guess_in_previous_hypotheses", True) is not False,
                PROGRESS_BEFORE: float(info.get("progress_before", game.progress())),
                HYPOTHESIS_SIZE: self._hypothesis_size(game, info),
            }
        )
        return float(reward), finished, fields, prefix

    def _failed_row(self, idx: int, reply: str, error: Exception):
        row, message = super()._failed_row(idx, reply, error)
        # the T3 columns of a failed row: no query, no answer, no progress made
        row[PROGRESS_BEFORE] = row[PROGRESS]
        try:
            row[HYPOTHESIS_SIZE] = self._hypothesis_size(self.games[idx], {})
        except Exception:
            row[HYPOTHESIS_SIZE] = -1.0
        if idx < len(self.last_infos):
            self.last_infos[idx] = {"env_error": f"{type(error).__name__}: {error}"}
        return row, message

    def _out_of_budget(self, idx: int) -> bool:
        # one query or answer per turn: only the turn limit applies
        return self._turns[idx] >= self.max_turn

    @classmethod
    def _complete_done(cls, done_spec: Composite, data: TensorDictBase) -> TensorDictBase:
        # TransformedEnv._step calls this with the full-batch done spec; for a sub-batch of rows
        # the reshape to (num_envs, 1) would fail. _step always writes every done key with the
        # sub-batch's shape, so there is nothing to complete then.
        if done_spec.ndim and tuple(data.batch_size[-done_spec.ndim :]) != tuple(done_spec.shape):
            return data
        return super()._complete_done(done_spec, data)

    def append_transform(self, transform) -> "TransformedEnv":  # noqa: F821
        """Wrap in a :class:`~ragen_torchrl.envs.text_env.RowTransformedEnv` (a ``TransformedEnv``
        that accepts sub-batches of rows, like this env)."""
        from ..text_env import RowTransformedEnv

        return RowTransformedEnv(self, transform)

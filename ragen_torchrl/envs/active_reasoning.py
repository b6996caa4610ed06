"""Active-reasoning chat environments (the T3 tasks) over the interactive game cores.

Each turn the model replies ``<think>reasoning</think>`` followed by either
``<interact>query</interact>`` (ask the environment) or ``<answer>final answer</answer>``
(end the episode). :class:`ActiveReasoningEnv` maps the reply to the game core's
``step("interact:" + query)`` / ``step("answer:" + answer)`` and shows the game's feedback
(``info["feedback"]``) at the top of the next user message. The first user message is the
full task description (``game.render_text()``); later ones are only
``"Feedback: ...\\nTurns left: N."`` because the conversation already holds the history.

Rules (on top of :class:`~ragen_torchrl.envs.text_env.TextGameEnv`'s TensorDict contract):

* rewards are terminal only: a query returns reward 0; the answer ends the episode
  (``terminated``) with the game's terminal reward (exact match, fraction of circuits, binary
  similarity, word F1 ...);
* a reply without a well-formed ``<think>`` block followed by a non-empty ``<interact>`` or
  ``<answer>`` block is *malformed*. ``malformed="end"`` (default, the reference code) ends the
  episode there (``terminated``, reward 0, no success); ``malformed="penalty"`` gives
  ``format_penalty`` (−0.1) and continues with the game state unchanged except that the turn is
  used (so a model cannot stall forever with malformed replies);
* ``max_turn`` (queries, answers and malformed replies together; paper defaults: GuessNumbers 10,
  CircuitDecoding 10, SituationPuzzles 15, PreferenceEstimation 10, MovieRecommendation 5) ends the
  episode as ``truncated`` with reward 0 for that turn when no answer was given. The user message
  before the last turn asks for the answer (:data:`LAST_TURN_PROMPT`), as the reference does when
  the budget runs out.

Besides the base keys (``progress`` = the game's ``progress()`` after the turn), every step
writes the per-turn information the T3 truncation transform
(:class:`~ragen_torchrl.transforms.t3.T3Truncation`) needs, as tensors of shape ``(B,)``:

=================================  ======  ===============================================
key                                dtype   meaning
=================================  ======  ===============================================
``progress_before``                float   ``progress()`` before this turn
``hypothesis_size``                float   ``|H_t|`` (GuessNumbers, CircuitDecoding), −1 elsewhere
``guess_in_previous_hypotheses``   bool    GuessNumbers: the guess was in ``H_{t-1}``; True elsewhere
``is_query``                       bool    this turn was a well-formed ``<interact>``
``is_answer``                      bool    this turn was a well-formed ``<answer>``
=================================  ======  ===============================================

and keeps the game's whole info dict of the last step of row ``i`` in ``env.last_infos[i]``
(e.g. ``judge_answer``, ``estimate``). ``action_is_valid`` is True when the tags parsed *and* the
game accepted the query/answer; ``action_is_effective`` is the game's (e.g. ``|H|`` shrank).

Levels: ``level_seed`` picks the instance; seeds in ``[2**30, 2**31)`` (the trainer's
validation seeds) draw from the game's ``"val"`` split, all others from ``"train"``, so
validation instances are never trained on (:func:`ragen_torchrl.envs.splits.level_split`).

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = GuessNumbersEnv(num_envs=1)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> secret = env.games[0].secret
    >>> reply = History(role="assistant", content=f"<think>lucky</think><answer>{secret}</answer>", batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> out["reward"].item(), out["success"].item(), out["terminated"].item()
    (1.0, True, True)
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Composite, Unbounded

from ..keys import (
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
from .games.circuit_decoding import CircuitDecodingGame
from .games.guess_numbers import GuessNumbersGame
from .games.interactive import InteractiveGame
from .games.movie_recommendation import MovieRecommendationGame
from .games.preference_estimation import PreferenceEstimationGame
from .games.situation_puzzles import PUZZLES, SituationPuzzlesGame
from .parsing import MAX_REPLY_CHARS, THINK_RE
from .splits import level_split
from .text_env import TextGameEnv

__all__ = [
    "ActiveReasoningEnv",
    "ActiveReply",
    "CircuitDecodingEnv",
    "GuessNumbersEnv",
    "MovieRecommendationEnv",
    "PreferenceEstimationEnv",
    "SituationPuzzlesEnv",
    "INVALID_REPLY",
    "LAST_TURN_PROMPT",
    "MALFORMED_MODES",
    "parse_active_reply",
]

#: system prompt shared by the active-reasoning tasks (the task itself is in the first user message)
ACTIVE_FORMAT_INSTRUCTIONS = (
    "You solve a task by asking questions. Each turn, reason inside <think>...</think>, then either ask "
    "one query with <interact>QUERY</interact> or give your final answer with <answer>ANSWER</answer>. "
    "The answer ends the episode. When asked to present your answer, answer at once."
)
#: first line of the next user message after a reply without valid tags
INVALID_REPLY = (
    "Invalid reply: reason inside <think>...</think>, then use <interact>QUERY</interact> or <answer>ANSWER</answer>."
)

#: appended to the user message before the last turn of the budget (reference: "... Now present
#: your answer inside <answer> and </answer> ..."); the T3 transform uses the same sentence
LAST_TURN_PROMPT = "This is your last turn. Now present your answer inside <answer> and </answer>."
#: what a malformed reply does: ``"end"`` the episode with reward 0 (reference code, default) or
#: ``"penalty"``: ``format_penalty`` and the episode continues
MALFORMED_MODES = ("end", "penalty")

_ACTION_RE = re.compile(r"<(interact|answer)>(.*?)</\1>", re.DOTALL)


@dataclass(frozen=True)
class ActiveReply:
    """What one reply contained.

    Attributes:
        kind: ``"interact"``, ``"answer"``, or ``None`` when the format is wrong.
        payload: the stripped text inside the tag (``""`` when ``kind`` is ``None``).
        think: the stripped reasoning text (``""`` when absent).
    """

    kind: str | None
    payload: str = ""
    think: str = ""

    @property
    def is_valid(self) -> bool:
        return self.kind is not None

    def as_action(self) -> str:
        """The game-core action: ``"interact:<payload>"`` / ``"answer:<payload>"``."""
        if self.kind is None:
            raise ValueError("an invalid reply has no action")
        return f"{self.kind}:{self.payload}"


def parse_active_reply(text: Any, *, require_think: bool = True) -> ActiveReply:
    """Parse ``<think>…</think>`` then the first ``<interact>…</interact>`` or ``<answer>…</answer>``.

    Never raises. The opening ``<think>`` may be missing when generation was primed with it.
    The first action block after the reasoning counts; an empty block is a format error.

    Example:
        >>> parse_active_reply("<think>try</think><interact>0123</interact>")
        ActiveReply(kind='interact', payload='0123', think='try')
        >>> parse_active_reply("<answer>0123</answer>").kind is None  # no reasoning block
        True
        >>> parse_active_reply("<think>x</think><answer> </answer>").kind is None
        True
    """
    if not isinstance(text, str):
        return ActiveReply(None)
    text = text[:MAX_REPLY_CHARS]  # bounded regex work on runaway generations
    if "<think>" not in text and "</think>" in text:
        text = "<think>" + text
    think_m = THINK_RE.search(text)
    think = think_m.group(1).strip() if think_m else ""
    if require_think and think_m is None:
        return ActiveReply(None, think=think)
    action_m = _ACTION_RE.search(text, think_m.end() if think_m else 0)
    if action_m is None:
        return ActiveReply(None, think=think)
    payload = action_m.group(2).strip()
    if not payload:
        return ActiveReply(None, think=think)
    return ActiveReply(action_m.group(1), payload, think)


class ActiveReasoningEnv(TextGameEnv):
    """Batched chat env over an :class:`~ragen_torchrl.envs.games.guess_numbers.InteractiveGame`.

    Args:
        game_factory: ``game_factory(level_seed, sample_seed) -> InteractiveGame``; the game's
            ``max_turns`` should equal ``max_turn`` (it is shown to the model and drives the
            demonstrator's decision to answer). The subclasses pass it through.
        num_envs: batch size B.
        max_turn: turns per episode (queries + answer + malformed replies).
        malformed: ``"end"`` (default, reference code): a reply without valid tags ends the
            episode with reward 0; ``"penalty"``: it gets ``format_penalty`` and the episode goes on.
        format_penalty: reward of a reply without valid tags with ``malformed="penalty"`` (−0.1),
            and, in both modes, of a row whose step raised (the env ends that row; see
            :class:`~ragen_torchrl.envs.text_env.TextGameEnv`).
        require_think: a reply without ``</think>`` is a format error (default True).
        noise_repeat: in demonstrations, share of noisy queries that repeat an earlier query
            (a belief-trap action); the rest are random queries (:meth:`random_query`).
        system_prompt: overrides :data:`ACTIVE_FORMAT_INSTRUCTIONS`.
        device: device of the reward/done tensors.

    Input of ``reset``: as :class:`~ragen_torchrl.envs.text_env.TextGameEnv` (``level_seed``,
    ``group_id``, ``sample_seed`` -- unused: the T3 games are deterministic given the level --,
    all optional, and a ``"_reset"`` mask). ``step`` accepts any subset of rows, addressed by
    ``env_index``.

    Example:
        >>> env = ActiveReasoningEnv(lambda seed, sample: GuessNumbersGame.generate(seed, max_turns=3),
        ...                          num_envs=2, max_turn=3)
        >>> env.format_reply("guess", ["interact:0123"])
        '<think>guess</think><interact>0123</interact>'
    """

    #: T3 task name of the game (``t3_rules.make_rule``); set by the subclasses
    task_name: str = ""

    def __init__(
        self,
        game_factory: Callable[[int, int], InteractiveGame],
        *,
        num_envs: int = 1,
        max_turn: int = 10,
        malformed: str = "end",
        format_penalty: float = -0.1,
        require_think: bool = True,
        noise_repeat: float = 0.5,
        system_prompt: str | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if not 0.0 <= float(noise_repeat) <= 1.0:
            raise ValueError(f"noise_repeat must be in [0, 1], got {noise_repeat}")
        if malformed not in MALFORMED_MODES:
            raise ValueError(f"malformed must be one of {', '.join(MALFORMED_MODES)}, got {malformed!r}")
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

    def _apply_reply(self, idx: int, game: InteractiveGame, reply: str):
        parsed = parse_active_reply(reply, require_think=self.require_think)
        if parsed.kind is None:
            # the game's own invalid action: uses the turn, changes nothing else
            _, finished, info = game.step("")
            if self.malformed == "end":
                # reference code: a malformed reply ends the episode, unrewarded
                game.done = True
                reward, finished, fields = 0.0, True, {SUCCESS: False}
                prefix = INVALID_REPLY + " The episode is over.\n"
            else:
                reward, prefix, fields = self.format_penalty, INVALID_REPLY + "\n", {}
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
        from .text_env import RowTransformedEnv

        return RowTransformedEnv(self, transform)


# ------------------------------------------------------------------------------------ tasks
class GuessNumbersEnv(ActiveReasoningEnv):
    """GuessNumbers: find a code of distinct digits from (in place, misplaced) feedback; reward = exact match.

    Args:
        num_digits, num_symbols: code length and alphabet, digits ``0 .. num_symbols-1``
            (default 4 of 10, the paper's 5040 codes; the ``guess_numbers_small`` preset uses
            3 of 6, 120 codes).
        terse, list_candidates: shorter demonstrator reasoning that lists the candidates once at
            most ``list_candidates`` are left (:class:`GuessNumbersGame`).
        split_by: ``"secret"`` (default: validation secrets are never training secrets) or
            ``"level"`` (both splits draw from every code; for tiny code spaces), see
            :meth:`GuessNumbersGame.generate`.
        Other arguments: :class:`ActiveReasoningEnv`.

    Example:
        >>> env = GuessNumbersEnv(num_envs=2)
        >>> env.max_turn, env.task_name
        (10, 'GuessNumbers')
        >>> GuessNumbersEnv(num_digits=3, num_symbols=6).game_factory(0, 0).hypothesis_size
        120
    """

    task_name = "GuessNumbers"
    #: random guesses tried when looking for one that leaves ``H`` unchanged (a noisy demonstration)
    STALL_TRIES = 32

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = GuessNumbersGame.max_turns,
        num_digits: int = 4,
        num_symbols: int = 10,
        terse: bool = False,
        list_candidates: int | None = None,
        split_by: str = "secret",
        **kwargs: Any,
    ) -> None:
        from .games.guess_numbers import _check_size

        self.num_digits, self.num_symbols = _check_size(num_digits, num_symbols)
        self.terse = bool(terse)
        if split_by not in GuessNumbersGame.SPLIT_BY:
            raise ValueError(f"split_by must be one of {GuessNumbersGame.SPLIT_BY}, got {split_by!r}")

        def factory(level_seed: int, sample: int) -> GuessNumbersGame:
            return GuessNumbersGame.generate(
                level_seed,
                level_split(level_seed),
                num_digits=self.num_digits,
                num_symbols=self.num_symbols,
                split_by=split_by,
                terse=self.terse,
                list_candidates=list_candidates,
                max_turns=max_turn,
            )

        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        """A guess that makes no progress (leaves ``H`` unchanged: a belief-trap query) when one of
        :attr:`STALL_TRIES` random guesses does, else the last random guess."""
        from .games.guess_numbers import _fb

        digits = "0123456789"[: game.num_symbols]
        hyps = game.hypotheses
        guess = ""
        for _ in range(self.STALL_TRIES):
            guess = "".join(rng.sample(digits, game.num_digits))
            if hyps:
                first = _fb(hyps[0], guess)
                if all(_fb(h, guess) == first for h in hyps):  # stops at the first split
                    return guess
        return guess

    def demo_action(self, game: InteractiveGame, rng: random.Random, off_oracle: bool) -> str:
        # The game's minimax oracle is cached along its own decision tree; after a noisy query the
        # history is new and every minimax decision costs ~0.1 s (minutes for an SFT data set).
        # Off the tree, a random guess consistent with all feedback (inside H, so |H| shrinks) is
        # ~50x cheaper and still finishes well within the budget.
        hyps = game.hypotheses
        if off_oracle and len(hyps) > 1 and game.turns_left > 1:
            return game.INTERACT_PREFIX + rng.choice(hyps)
        return game.oracle_action()


class CircuitDecodingEnv(ActiveReasoningEnv):
    """CircuitDecoding: identify hidden Boolean circuits by querying them; reward = fraction identified.

    Args:
        num_circuits, n_inputs, family, split_by: instance generator settings
            (:meth:`CircuitDecodingGame.generate`).
        terse: shorter demonstrator reasoning that carries each circuit's known truth-table cells
            (:meth:`CircuitDecodingGame.known_table`).

    Example:
        >>> CircuitDecodingEnv(num_envs=1, num_circuits=1).max_turn
        10
    """

    task_name = "CircuitDecoding"

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = CircuitDecodingGame.max_turns,
        num_circuits: int = 2,
        n_inputs: int = 3,
        family: str = "default",
        terse: bool = False,
        split_by: str = "circuits",
        **kwargs: Any,
    ) -> None:
        self.num_circuits, self.n_inputs, self.family = int(num_circuits), int(n_inputs), family
        self.terse = bool(terse)
        if split_by not in CircuitDecodingGame.SPLIT_BY:
            raise ValueError(f"split_by must be one of {CircuitDecodingGame.SPLIT_BY}, got {split_by!r}")

        def factory(level_seed: int, sample: int) -> CircuitDecodingGame:
            return CircuitDecodingGame.generate(
                level_seed,
                level_split(level_seed),
                num_circuits=num_circuits,
                n_inputs=n_inputs,
                family=family,
                split_by=split_by,
                max_turns=max_turn,
                terse=self.terse,
            )

        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    #: random queries tried when looking for one that splits nothing (a noisy demonstration)
    STALL_TRIES = 32

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        """A query that makes no progress (its circuit's candidates all give the same bit: a
        belief-trap query) when one of :attr:`STALL_TRIES` random queries does, else the last one."""
        query = ""
        for _ in range(self.STALL_TRIES):
            i = rng.randrange(len(game.names))
            k = rng.randrange(len(game.assignments))
            query = f"{game.names[i]}(" + ",".join(map(str, game.assignments[k])) + ")"  # one circuit per query
            if len({(t >> k) & 1 for t in game.alive[i]}) <= 1:
                return query
        return query


class PreferenceEstimationEnv(ActiveReasoningEnv):
    """PreferenceEstimation: estimate a hidden preference vector from pairwise questions
    ("Would you prefer item A over item B?" -> Yes / Equal / No); reward 1 iff
    ``cos(v̂, v*) > threshold``.

    Args:
        num_items, dim: instance size (20 items, 8 dimensions as the reference);
        nonnegative: ``v*`` has non-negative weights (default True, the reference);
        threshold: success cosine (0.88);
        estimate_source: ``"agent"`` (progress from the estimates the model reports, the paper's
            proxy) or ``"observations"`` (closed-form estimate from the comparisons).

    Example:
        >>> PreferenceEstimationEnv(num_envs=1).max_turn
        10
    """

    task_name = "PreferenceEstimation"

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = PreferenceEstimationGame.max_turns,
        num_items: int = 20,
        dim: int = 8,
        nonnegative: bool = True,
        threshold: float = 0.88,
        estimate_source: str = "agent",
        oracle_particles: int = 500,
        **kwargs: Any,
    ) -> None:
        self.num_items, self.dim = int(num_items), int(dim)

        def factory(level_seed: int, sample: int) -> PreferenceEstimationGame:
            return PreferenceEstimationGame.generate(
                level_seed,
                level_split(level_seed),
                num_items=num_items,
                dim=dim,
                nonnegative=nonnegative,
                threshold=threshold,
                estimate_source=estimate_source,
                oracle_particles=oracle_particles,
                max_turns=max_turn,
            )

        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        a, b = rng.sample(range(1, len(game.items) + 1), 2)
        query = f"Would you prefer item {a} over item {b}?"
        if game.estimate is not None:  # keep reporting the current estimate, as the oracle does
            query += " estimate: " + ", ".join(f"{x:.2f}" for x in game.estimate)
        return query


class MovieRecommendationEnv(ActiveReasoningEnv):
    """MovieRecommendation: pairwise questions about seen movies ("Would you prefer 3 over 5?" ->
    Yes / Equal / No), then recommend the best unseen one; reward = exact match.

    Args:
        num_seen, num_candidates: movies listed per episode; estimate_source: as
            PreferenceEstimation; catalog_path: optional user catalog
            (:func:`~ragen_torchrl.envs.games.movie_recommendation.load_catalog`).

    Example:
        >>> MovieRecommendationEnv(num_envs=1).max_turn
        5
    """

    task_name = "MovieRecommendation"

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = MovieRecommendationGame.max_turns,
        num_seen: int = 8,
        num_candidates: int = 8,
        estimate_source: str = "agent",
        catalog_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        from .games.movie_recommendation import generate_catalog, load_catalog

        catalog = load_catalog(catalog_path) if catalog_path else generate_catalog(0)

        def factory(level_seed: int, sample: int) -> MovieRecommendationGame:
            return MovieRecommendationGame.generate(
                level_seed,
                level_split(level_seed),
                catalog=catalog,
                num_seen=num_seen,
                num_candidates=num_candidates,
                estimate_source=estimate_source,
                max_turns=max_turn,
            )

        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        a, b = rng.sample(range(1, len(game.seen) + 1), 2)
        query = f"Would you prefer {a} over {b}?"
        if game.estimate is not None:
            query += " estimate: " + ", ".join(f"{x:.2f}" for x in game.estimate)
        return query


class SituationPuzzlesEnv(ActiveReasoningEnv):
    """SituationPuzzles: yes/no questions to a judge, then an explanation; reward = word F1.

    Args:
        judge: a :class:`~ragen_torchrl.envs.games.situation_puzzles.Judge` (default: the
            rule-based judge over each puzzle's facts); success_threshold: F1 counted as success.

    Example:
        >>> SituationPuzzlesEnv(num_envs=1).max_turn
        15
    """

    task_name = "SituationPuzzles"

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = SituationPuzzlesGame.max_turns,
        judge: Any = None,
        success_threshold: float = 0.5,
        **kwargs: Any,
    ) -> None:
        def factory(level_seed: int, sample: int) -> SituationPuzzlesGame:
            return SituationPuzzlesGame.generate(
                level_seed,
                level_split(level_seed),
                judge=judge,
                success_threshold=success_threshold,
                max_turns=max_turn,
            )

        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        # a question about another puzzle: usually off-topic, so the judge says Unknown
        puzzle = rng.choice(PUZZLES)
        return rng.choice(puzzle.facts).question if puzzle.facts else "Is it raining?"

"""T3: truncate belief-trapped trajectories during training (REFERENCE §3).

:class:`T3Truncation` is a torchrl env :class:`~torchrl.envs.transforms.Transform` for the
active-reasoning envs (:mod:`ragen_torchrl.envs.active`). After every step it feeds,
per row (addressed by ``env_index``), the env's ``progress`` and turn info to the task's stall
rule (:func:`ragen_torchrl.transforms.t3_rules.make_rule`). What happens when the rule fires is
what the reference implementation does (it never masks tokens afterwards; the trajectory is
simply shorter):

1. firing turn t (a query): the episode continues, and :attr:`T3Truncation.prompt`
   (``"Now present your answer inside <answer> and </answer>."``, the reference's wording
   shortened) is appended, on a new line, to the next user message (after the query's feedback);
2. turn t + 1 is the one *forced-answer* turn: an ``<answer>`` is scored by the env as usual
   (normal terminal reward); anything else (a query, or a malformed reply that the env lets
   continue) ends the episode there: ``done`` = ``truncated`` = True, ``terminated`` = False,
   reward 0 for a query (a malformed reply keeps the env's format penalty).

The rule is fed by every turn the env does not end itself: well-formed queries (``is_query``)
and malformed replies (neither query nor answer), which make no epistemic progress and count
toward the stall window (only reachable with the env's ``malformed="retry"`` or ``"penalty"``:
under the default ``"auto"`` the env ends the episode on a malformed reply while this transform
is active, as the reference does with T3 on in training). Turns on which the env ends the episode
itself (answer, malformed reply, ``max_turn``) never fire. T3 never extends the turn budget: a
rule firing on the last turn changes nothing.

The transform tells the base env whether it is active (``env.t3_active``, at every reset and on
:meth:`T3Truncation.set_enabled`), which decides the env's ``malformed="auto"``.

Output keys (bool, ``(B,)``), kept apart so that metrics can tell "the rule fired" from "the
episode ended truncated" (``any`` over an episode's steps marks the episode):

* ``t3_rule_fired``: True on the turn the rule fired;
* ``truncated_by_t3``: True on the forced-answer turn when the episode ends there *without*
  success (a query, a malformed reply, or a wrong answer). A correct answer on the forced-answer
  turn is a success, not a truncation.

Training only: the transform is a no-op (it still writes ``truncated_by_t3 = False``) when
``enabled`` is False (``T3Truncation(enabled=False)`` or ``transform.set_enabled(False)``);
switch between episodes, not in the middle of one. (torchrl's ``TransformedEnv`` puts every
transform in eval mode when it is attached, so the ``nn.Module`` train/eval mode cannot be the
switch.)

Sub-batches: the env steps only running rows; a plain ``TransformedEnv`` checks that the input
has the full batch size and would reject them, so wrap with :class:`~ragen_torchrl.envs.RowTransformedEnv` (which
``ActiveReasoningEnv.append_transform`` does for you).

Token accounting (:func:`t3_token_stats`) and per-task defaults (:func:`t3_config_defaults`)
are pure helpers for the trainer and the benchmark.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from ragen_torchrl.envs import make_env
    >>> env = make_env("guess_numbers", num_envs=2).append_transform(T3Truncation())
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([1, 1]), group_id=torch.tensor([0, 0]), batch_size=[2]))
    >>> td["truncated_by_t3"].tolist(), td["t3_rule_fired"].tolist()
    ([False, False], [False, False])
    >>> env.transform.set_enabled(False).active  # validation: no truncation
    False
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase, lazy_stack
from torchrl.data import Bounded, Composite
from torchrl.data.llm import History
from torchrl.envs import EnvBase, Transform, TransformedEnv

from ..keys import (
    DONE,
    ENV_INDEX,
    GUESS_IN_PREVIOUS_HYPOTHESES,
    HISTORY_PROMPT,
    IS_ANSWER,
    IS_QUERY,
    NUM_TOKENS,
    NUM_TURNS,
    PROGRESS,
    PROGRESS_BEFORE,
    RESET,
    REWARD,
    SUCCESS,
    T3_KEYS,
    T3_RULE_FIRED,
    TERMINATED,
    TRUNCATED,
    TRUNCATED_BY_T3,
)
from .t3_rules import PAPER_DEFAULTS, StallRule, _canonical, make_rule

__all__ = [
    "DEFAULT_PROMPT",
    "T3Truncation",
    "t3_config_defaults",
    "t3_token_stats",
]

#: appended to the next user message when T3 fires (reference: "... Now present your answer
#: inside <answer> and </answer> using the format specified in the instruction.")
DEFAULT_PROMPT = "Now present your answer inside <answer> and </answer>."

#: registry name of each T3 env -> task name of the rules
ENV_TASKS = {
    "guess_numbers": "GuessNumbers",
    "circuit_decoding": "CircuitDecoding",
    "situation_puzzles": "SituationPuzzles",
    "preference_estimation": "PreferenceEstimation",
    "movie_recommendation": "MovieRecommendation",
}


def _innermost_env(env: Any) -> Any:
    while isinstance(env, TransformedEnv):
        env = env.base_env
    return env


class T3Truncation(Transform):
    """Truncate trajectories whose progress proxy stalled (see the module docstring).

    Args:
        task: T3 task or env registry name (``"GuessNumbers"``, ``"guess_numbers"``, ...);
            ``None`` takes ``task_name`` from the wrapped env at the first reset.
        k: stall window (``None``: paper default of the task, :func:`t3_config_defaults`).
        cumulative: GuessNumbers/CircuitDecoding only: count stalled turns over the episode
            (True, the reference CircuitDecoding code) or consecutively (False, the paper's text
            and the default).
        outside_trigger: GuessNumbers only: also fire after ``k`` guesses outside ``H_{t-1}``
            (not in the paper; default False). Config key ``t3.outside_trigger``.
        rule: PreferenceEstimation / MovieRecommendation only: which stall rule
            (:data:`~ragen_torchrl.transforms.t3_rules.PREFERENCE_RULES`; ``None`` = ``"improve"``,
            the paper text; ``"decrease"``, ``"reference"``, and ``"drift"``, the unsupervised rule the
            reference code runs for both tasks). Config key ``t3.rule``.
        enabled: False makes the transform a no-op (validation).
        prompt: text appended to the next user message when the rule fires.

    Keys read from each step: ``env_index``, ``progress``, ``progress_before``, ``is_query``,
    ``is_answer``, ``success``, ``guess_in_previous_hypotheses``, ``done`` (and the base env's
    ``last_infos[env_index]`` when it has them, for rule inputs that are not tensors). Keys
    written: ``t3_rule_fired``, ``truncated_by_t3``; on a forced-answer turn without an answer
    also ``done``, ``truncated``, ``terminated``, ``reward``.

    Example:
        >>> t3 = T3Truncation("circuit_decoding", k=3, cumulative=True)
        >>> t3.active, t3.set_enabled(False).active, t3.set_enabled(True).active
        (True, False, True)
    """

    def __init__(
        self,
        task: str | None = None,
        *,
        k: int | None = None,
        cumulative: bool | None = None,
        rule: str | None = None,
        outside_trigger: bool = False,
        enabled: bool = True,
        prompt: str = DEFAULT_PROMPT,
    ) -> None:
        super().__init__()
        self.task = None if task is None else _task_name(task)
        self.k = None if k is None else int(k)
        self.cumulative = cumulative
        self.rule = rule
        self.outside_trigger = bool(outside_trigger)
        self.enabled = bool(enabled)
        self.prompt = str(prompt)
        if self.task is not None:
            self._make()  # fail early on bad options
        self._rules: dict[int, StallRule] = {}
        # rows granted their one forced-answer turn, waiting for it
        self._forced: set[int] = set()

    @property
    def active(self) -> bool:
        """Whether the transform truncates (``enabled``)."""
        return self.enabled

    def set_enabled(self, enabled: bool = True) -> "T3Truncation":
        """Switch truncation on (training) or off (validation); returns ``self``."""
        self.enabled = bool(enabled)
        self._tell_env()
        return self

    def _tell_env(self) -> None:
        # the env's malformed="auto" ends the episode only while T3 truncation is active
        base = self._base_env()
        if base is not None and hasattr(base, "t3_active"):
            base.t3_active = self.active

    def _base_env(self) -> EnvBase | None:
        try:
            container = self.container
        except AttributeError:
            return None
        return None if container is None else _innermost_env(container)

    def _rule(self, index: int) -> StallRule:
        rule = self._rules.get(index)
        if rule is None:
            if self.task is None:
                task = getattr(self._base_env(), "task_name", "")
                if not task:
                    raise RuntimeError("T3Truncation(task=None) needs an env with a task_name (an ActiveReasoningEnv)")
                self.task = _task_name(task)
            rule = self._rules[index] = self._make()
        return rule

    def _make(self) -> StallRule:
        return make_rule(self.task, self.k, self.cumulative, self.outside_trigger, self.rule)

    # -- specs -----------------------------------------------------------------------
    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for key in T3_KEYS:
            observation_spec[key] = Bounded(
                0, 1, shape=observation_spec.shape, dtype=torch.bool, device=observation_spec.device
            )
        return observation_spec

    # -- reset/step --------------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        self._tell_env()
        n = tensordict_reset.batch_size[0]
        index = tensordict_reset.get(ENV_INDEX).reshape(-1).tolist()
        progress = tensordict_reset.get(PROGRESS).reshape(-1).tolist()
        # a partial reset ("_reset" mask, torchrl's auto-reset of finished rows) restarts only
        # the masked rows; the others keep their stall counters
        mask = None if tensordict is None else tensordict.get(RESET, None)
        restart = [True] * n if mask is None else mask.reshape(n, -1).any(-1).tolist()
        for i, p, r in zip(index, progress, restart):
            if r:
                self._rule(i).reset(p)
                self._forced.discard(i)
        for key in T3_KEYS:
            tensordict_reset.set(key, torch.zeros(n, dtype=torch.bool, device=tensordict_reset.device))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        n = next_tensordict.batch_size[0]
        fired = torch.zeros(n, dtype=torch.bool, device=next_tensordict.device)
        cut = torch.zeros(n, dtype=torch.bool, device=next_tensordict.device)
        if not self.active:
            next_tensordict.set(T3_RULE_FIRED, fired)
            next_tensordict.set(TRUNCATED_BY_T3, cut)
            return next_tensordict

        def column(key: str) -> list:
            value = next_tensordict.get(key, None)
            return value.reshape(-1).tolist() if value is not None else [None] * n

        index = column(ENV_INDEX)
        done = column(DONE)
        is_query = column(IS_QUERY)
        is_answer = column(IS_ANSWER)
        success = column(SUCCESS)
        progress = column(PROGRESS)
        before = column(PROGRESS_BEFORE)
        in_prev = column(GUESS_IN_PREVIOUS_HYPOTHESES)
        infos = getattr(self._base_env(), "last_infos", None)
        end_rows, prompt_rows = [], []
        for row, i in enumerate(index):
            if i in self._forced:  # the forced-answer turn
                self._forced.discard(i)
                # the episode ends here; only a successful answer is not a truncation
                cut[row] = not bool(success[row])
                if not done[row]:
                    end_rows.append(row)
                continue
            if done[row] or is_answer[row]:
                continue
            if is_query[row]:
                info: dict[str, Any] = dict(infos[i]) if infos is not None and i < len(infos) else {}
            else:  # malformed reply (the env let the episode continue): no progress, a stall
                info = {"malformed": True}
            if before[row] is not None:
                info["progress_before"] = before[row]
            if in_prev[row] is not None and is_query[row]:
                info["guess_in_previous_hypotheses"] = bool(in_prev[row])
            if self._rule(i).update(progress[row], info):
                fired[row] = True
                self._forced.add(i)
                prompt_rows.append(row)
        if end_rows:
            self._end(next_tensordict, end_rows, is_query)
        if prompt_rows:
            self._append_prompt(next_tensordict, prompt_rows)
        next_tensordict.set(T3_RULE_FIRED, fired)
        next_tensordict.set(TRUNCATED_BY_T3, cut)
        return next_tensordict

    def _end(self, next_tensordict: TensorDictBase, rows: list[int], is_query: list[bool]) -> None:
        rows_t = torch.tensor(rows, dtype=torch.long)
        for key, value in ((DONE, True), (TRUNCATED, True), (TERMINATED, False)):
            flag = next_tensordict.get(key).clone()
            flag[rows_t] = value
            next_tensordict.set(key, flag)
        reward = next_tensordict.get(REWARD).clone()
        for row in rows:
            if is_query[row]:
                reward[row] = 0.0  # a query instead of the answer: the episode ends unrewarded
        next_tensordict.set(REWARD, reward)

    def _append_prompt(self, next_tensordict: TensorDictBase, rows: list[int]) -> None:
        # ChatEnv has no hook for extra user text, so the last user message of each firing row
        # is rebuilt with the prompt appended (rows may differ in length: edit row by row)
        histories = list(next_tensordict.get(HISTORY_PROMPT).unbind(0))
        for row in rows:
            h: History = histories[row]
            if self.prompt in h.content[-1]:
                continue  # the env already asks for the answer (last turn of the budget)
            msg = History(role="user", content=f"{h.content[-1]}\n{self.prompt}", batch_size=(1,))
            histories[row] = h[:-1].extend(msg, inplace=False, dim=-1)
        next_tensordict.set(HISTORY_PROMPT, lazy_stack(histories))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError(
            "T3Truncation is an env transform (it needs the env's per-step data); use it in a TransformedEnv"
        )


def _task_name(name: str) -> str:
    task = ENV_TASKS.get(name) or _canonical(name)
    if task is None:
        raise ValueError(f"unknown T3 task {name!r}; valid names: {', '.join(sorted(ENV_TASKS))}")
    return task


def t3_config_defaults() -> dict[str, dict[str, Any]]:
    """Paper defaults per env registry name: ``k`` and, where it applies, ``cumulative``.

    Example:
        >>> t3_config_defaults()["circuit_decoding"]
        {'k': 3, 'cumulative': False}
        >>> t3_config_defaults()["situation_puzzles"]
        {'k': 5}
    """
    out = {}
    for env_name, task in ENV_TASKS.items():
        entry = {"k": int(PAPER_DEFAULTS[task]["k"])}
        if PAPER_DEFAULTS[task]["cumulative"] is not None:
            entry["cumulative"] = bool(PAPER_DEFAULTS[task]["cumulative"])
        out[env_name] = entry
    return out


def t3_token_stats(records: Mapping[str, Any] | TensorDictBase, max_turn: int) -> dict[str, float]:
    """Token accounting of a batch of trajectory records (pure).

    Args:
        records: one row per trajectory with ``num_tokens`` (generated tokens), ``success``,
            ``num_turns`` and ``truncated_by_t3`` (the episode ended truncated by T3; absent = no
            truncation, as in a run without T3), optionally
            ``t3_rule_fired`` (the rule fired in the episode) (a TensorDict or a mapping of
            sequences).
        max_turn: the env's turn budget.

    Returns:
        ``t3/rollout_tokens``: generated tokens summed over the batch;
        ``t3/tokens_per_trajectory``: their mean;
        ``t3/tokens_per_success``: rollout tokens / number of successful trajectories (NaN
        without any success);
        ``t3/truncation_rate``: fraction of trajectories that *ended* truncated by T3 (a correct
        answer on the forced-answer turn is a success, not a truncation);
        ``t3/mean_turns_saved``: mean of ``max_turn - num_turns`` over the truncated
        trajectories (0.0 when none): the turns left unused in the budget, an upper bound on
        what the untruncated episode would have spent (it might have answered earlier);
        with ``t3_rule_fired``: ``t3/rule_fire_rate`` (fraction of trajectories whose rule fired)
        and ``t3/forced_answer_success_rate`` (success among those; NaN when the rule never
        fired).

    Example:
        >>> stats = t3_token_stats({"num_tokens": [100, 40], "success": [True, False],
        ...                         "num_turns": [10, 4], "truncated_by_t3": [False, True]}, max_turn=10)
        >>> stats["t3/rollout_tokens"], stats["t3/tokens_per_success"], stats["t3/mean_turns_saved"]
        (140.0, 140.0, 6.0)
        >>> stats = t3_token_stats({"num_tokens": [30, 40], "success": [True, False], "num_turns": [4, 4],
        ...                         "truncated_by_t3": [False, True], "t3_rule_fired": [True, True]}, max_turn=10)
        >>> stats["t3/truncation_rate"], stats["t3/rule_fire_rate"], stats["t3/forced_answer_success_rate"]
        (0.5, 1.0, 0.5)
    """
    if int(max_turn) < 1:
        raise ValueError(f"max_turn must be >= 1, got {max_turn}")

    def present(name: str) -> bool:
        return hasattr(records, "keys") and name in records.keys() and records.get(name) is not None

    def col(name: str, dtype: torch.dtype) -> torch.Tensor:
        if not present(name):
            raise KeyError(f"trajectory records need {name!r}")
        return torch.as_tensor(records.get(name)).reshape(-1).to(dtype)

    tokens = col(NUM_TOKENS, torch.float64)
    success = col(SUCCESS, torch.bool)
    turns = col(NUM_TURNS, torch.float64)
    # records of a run without T3 have no truncation column: nothing was truncated
    cut = col(TRUNCATED_BY_T3, torch.bool) if present(TRUNCATED_BY_T3) else torch.zeros_like(success)
    n = tokens.numel()
    total = float(tokens.sum())
    wins = int(success.sum())
    saved = (float(max_turn) - turns[cut]).clamp_min(0)
    extra: dict[str, float] = {}
    if present(T3_RULE_FIRED):
        rule = col(T3_RULE_FIRED, torch.bool)
        fired = int(rule.sum())
        extra["t3/rule_fire_rate"] = fired / n if n else 0.0
        extra["t3/forced_answer_success_rate"] = float(success[rule].float().mean()) if fired else math.nan
    return {
        "t3/rollout_tokens": total,
        "t3/tokens_per_trajectory": total / n if n else 0.0,
        "t3/tokens_per_success": total / wins if wins else math.nan,
        "t3/truncation_rate": float(cut.float().mean()) if n else 0.0,
        "t3/mean_turns_saved": float(saved.mean()) if saved.numel() else 0.0,
        **extra,
    }

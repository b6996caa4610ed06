"""T3: truncate belief-trapped trajectories during training (REFERENCE §3).

:class:`T3Truncation` is a torchrl env :class:`~torchrl.envs.transforms.Transform` for the
active-reasoning envs (:mod:`ragen_torchrl.envs.active_reasoning`). After every step it feeds,
per row (addressed by ``env_index``), the env's ``progress`` and turn info to the task's stall
rule (:func:`ragen_torchrl.transforms.t3_rules.make_rule`). What happens when the rule fires is
what the reference implementation does (it never masks tokens afterwards; the trajectory is
simply shorter):

1. firing turn t (a query): the episode continues, and :attr:`T3Truncation.prompt`
   (``"Now present your answer inside <answer> and </answer>."``, the reference's wording
   shortened) is appended, on a new line, to the next user message (after the query's feedback);
2. turn t + 1 is the one *forced-answer* turn: an ``<answer>`` is scored by the env as usual
   (normal terminal reward); anything else (a query, or a malformed reply) ends the episode
   there: ``done`` = ``truncated`` = True, ``terminated`` = False, reward 0 for a query (a
   malformed reply keeps the env's format penalty).

The rule is fed only by well-formed queries (``is_query``); the answer and malformed replies
(already punished by the format penalty) are not interactions. Turns on which the env ends the
episode itself (answer, ``max_turn``) never fire. T3 never extends the turn budget: a rule
firing on the last turn changes nothing.

Output key: ``truncated_by_t3`` (bool, ``(B,)``) is True on the firing turn and on the
forced-answer turn of a truncated episode, so ``any`` over an episode's steps marks it.

Training only: the transform is a no-op (it still writes ``truncated_by_t3 = False``) when
``enabled`` is False (``T3Truncation(enabled=False)`` or ``transform.set_enabled(False)``);
switch between episodes, not in the middle of one. (torchrl's ``TransformedEnv`` puts every
transform in eval mode when it is attached, so the ``nn.Module`` train/eval mode cannot be the
switch.)

Sub-batches: the env steps only running rows; a plain ``TransformedEnv`` checks that the input
has the full batch size and would reject them, so wrap with :class:`RowTransformedEnv` (which
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
    >>> td["truncated_by_t3"].tolist()
    [False, False]
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

from .t3_rules import PAPER_DEFAULTS, StallRule, _canonical, make_rule

__all__ = [
    "DEFAULT_PROMPT",
    "RowTransformedEnv",
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


class RowTransformedEnv(TransformedEnv):
    """A ``TransformedEnv`` whose base env accepts sub-batches of rows (addressed by ``env_index``).

    ``TransformedEnv`` inherits ``EnvBase``'s check that a step input has the full batch size and
    reshapes rewards to the full spec shape; the row-addressed envs override both, but a
    ``TransformedEnv`` does not consult its base env for them. This subclass delegates the two
    hooks to the base env, so a rollout can step only its running rows through transforms.

    Example:
        >>> from ragen_torchrl.envs import make_env
        >>> env = RowTransformedEnv(make_env("guess_numbers", num_envs=4), T3Truncation())
        >>> env.batch_locked
        False
    """

    def _assert_tensordict_shape(self, tensordict: TensorDictBase) -> None:
        self.base_env._assert_tensordict_shape(tensordict)

    def _step_proc_data(self, next_tensordict_out: TensorDictBase) -> TensorDictBase:
        return self.base_env._step_proc_data(next_tensordict_out)


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
            (True, the reference CircuitDecoding code) or consecutively (False).
        unsupervised: MovieRecommendation only: the estimate-drift rule (needs ``estimate``
            in the env's ``last_infos``).
        enabled: False makes the transform a no-op (validation).
        prompt: text appended to the next user message when the rule fires.

    Keys read from each step: ``env_index``, ``progress``, ``progress_before``, ``is_query``,
    ``guess_in_previous_hypotheses``, ``done`` (and the base env's ``last_infos[env_index]``
    when it has them, for rule inputs that are not tensors). Keys written: ``truncated_by_t3``;
    on a forced-answer turn without an answer also ``done``, ``truncated``, ``terminated``,
    ``reward``.

    Example:
        >>> t3 = T3Truncation("circuit_decoding", k=3, cumulative=False)
        >>> t3.active, t3.set_enabled(False).active, t3.set_enabled(True).active
        (True, False, True)
    """

    def __init__(
        self,
        task: str | None = None,
        *,
        k: int | None = None,
        cumulative: bool | None = None,
        unsupervised: bool = False,
        enabled: bool = True,
        prompt: str = DEFAULT_PROMPT,
    ) -> None:
        super().__init__()
        self.task = None if task is None else _task_name(task)
        self.k = None if k is None else int(k)
        self.cumulative = cumulative
        self.unsupervised = bool(unsupervised)
        self.enabled = bool(enabled)
        self.prompt = str(prompt)
        if self.task is not None:
            make_rule(self.task, self.k, self.cumulative, self.unsupervised)  # fail early on bad options
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
        return self

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
            rule = self._rules[index] = make_rule(self.task, self.k, self.cumulative, self.unsupervised)
        return rule

    # -- specs -----------------------------------------------------------------------
    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        observation_spec["truncated_by_t3"] = Bounded(0, 1, shape=observation_spec.shape, dtype=torch.bool,
                                                      device=observation_spec.device)
        return observation_spec

    # -- reset/step --------------------------------------------------------------------
    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        n = tensordict_reset.batch_size[0]
        index = tensordict_reset.get("env_index").reshape(-1).tolist()
        progress = tensordict_reset.get("progress").reshape(-1).tolist()
        for i, p in zip(index, progress):
            self._rule(i).reset(p)
            self._forced.discard(i)
        tensordict_reset.set("truncated_by_t3", torch.zeros(n, dtype=torch.bool, device=tensordict_reset.device))
        return tensordict_reset

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        n = next_tensordict.batch_size[0]
        fired = torch.zeros(n, dtype=torch.bool, device=next_tensordict.device)
        if not self.active:
            next_tensordict.set("truncated_by_t3", fired)
            return next_tensordict
        index = next_tensordict.get("env_index").reshape(-1).tolist()
        done = next_tensordict.get("done").reshape(-1).tolist()
        is_query = next_tensordict.get("is_query").reshape(-1).tolist()
        progress = next_tensordict.get("progress").reshape(-1).tolist()
        before = next_tensordict.get("progress_before", None)
        before = before.reshape(-1).tolist() if before is not None else [None] * n
        in_prev = next_tensordict.get("guess_in_previous_hypotheses", None)
        in_prev = in_prev.reshape(-1).tolist() if in_prev is not None else [None] * n
        infos = getattr(self._base_env(), "last_infos", None)
        end_rows, prompt_rows = [], []
        for row, i in enumerate(index):
            if i in self._forced:  # the forced-answer turn
                self._forced.discard(i)
                fired[row] = True
                if not done[row]:
                    end_rows.append(row)
                continue
            if done[row] or not is_query[row]:
                continue
            info: dict[str, Any] = dict(infos[i]) if infos is not None and i < len(infos) else {}
            if before[row] is not None:
                info["progress_before"] = before[row]
            if in_prev[row] is not None:
                info["guess_in_previous_hypotheses"] = bool(in_prev[row])
            if self._rule(i).update(progress[row], info):
                fired[row] = True
                self._forced.add(i)
                prompt_rows.append(row)
        if end_rows:
            self._end(next_tensordict, end_rows, is_query)
        if prompt_rows:
            self._append_prompt(next_tensordict, prompt_rows)
        next_tensordict.set("truncated_by_t3", fired)
        return next_tensordict

    def _end(self, next_tensordict: TensorDictBase, rows: list[int], is_query: list[bool]) -> None:
        rows_t = torch.tensor(rows, dtype=torch.long)
        for key, value in (("done", True), ("truncated", True), ("terminated", False)):
            flag = next_tensordict.get(key).clone()
            flag[rows_t] = value
            next_tensordict.set(key, flag)
        reward = next_tensordict.get("reward").clone()
        for row in rows:
            if is_query[row]:
                reward[row] = 0.0  # a query instead of the answer: the episode ends unrewarded
        next_tensordict.set("reward", reward)

    def _append_prompt(self, next_tensordict: TensorDictBase, rows: list[int]) -> None:
        # ChatEnv has no hook for extra user text, so the last user message of each firing row
        # is rebuilt with the prompt appended (rows may differ in length: edit row by row)
        histories = list(next_tensordict.get(("history", "prompt")).unbind(0))
        for row in rows:
            h: History = histories[row]
            msg = History(role="user", content=f"{h.content[-1]}\n{self.prompt}", batch_size=(1,))
            histories[row] = h[:-1].extend(msg, inplace=False, dim=-1)
        next_tensordict.set(("history", "prompt"), lazy_stack(histories))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise RuntimeError("T3Truncation is an env transform (it needs the env's per-step data); use it in a TransformedEnv")


def _task_name(name: str) -> str:
    task = ENV_TASKS.get(name) or _canonical(name)
    if task is None:
        raise ValueError(f"unknown T3 task {name!r}; valid names: {', '.join(sorted(ENV_TASKS))}")
    return task


def t3_config_defaults() -> dict[str, dict[str, Any]]:
    """Paper defaults per env registry name: ``k`` and, where it applies, ``cumulative``.

    Example:
        >>> t3_config_defaults()["circuit_decoding"]
        {'k': 3, 'cumulative': True}
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
            ``num_turns`` and ``truncated_by_t3`` (a TensorDict or a mapping of sequences).
        max_turn: the env's turn budget.

    Returns:
        ``t3/rollout_tokens``: generated tokens summed over the batch;
        ``t3/tokens_per_trajectory``: their mean;
        ``t3/tokens_per_success``: rollout tokens / number of successful trajectories (NaN
        without any success);
        ``t3/truncation_rate``: fraction of trajectories truncated by T3;
        ``t3/mean_turns_saved``: mean of ``max_turn - num_turns`` over the truncated
        trajectories (0.0 when none): the turns left unused in the budget, an upper bound on
        what the untruncated episode would have spent (it might have answered earlier).

    Example:
        >>> stats = t3_token_stats({"num_tokens": [100, 40], "success": [True, False],
        ...                         "num_turns": [10, 4], "truncated_by_t3": [False, True]}, max_turn=10)
        >>> stats["t3/rollout_tokens"], stats["t3/tokens_per_success"], stats["t3/mean_turns_saved"]
        (140.0, 140.0, 6.0)
    """
    if int(max_turn) < 1:
        raise ValueError(f"max_turn must be >= 1, got {max_turn}")

    def col(name: str, dtype: torch.dtype) -> torch.Tensor:
        value = records.get(name) if hasattr(records, "get") else None
        if value is None:
            raise KeyError(f"trajectory records need {name!r}")
        return torch.as_tensor(value).reshape(-1).to(dtype)

    tokens = col("num_tokens", torch.float64)
    success = col("success", torch.bool)
    turns = col("num_turns", torch.float64)
    cut = col("truncated_by_t3", torch.bool)
    n = tokens.numel()
    total = float(tokens.sum())
    wins = int(success.sum())
    saved = (float(max_turn) - turns[cut]).clamp_min(0)
    return {
        "t3/rollout_tokens": total,
        "t3/tokens_per_trajectory": total / n if n else 0.0,
        "t3/tokens_per_success": total / wins if wins else math.nan,
        "t3/truncation_rate": float(cut.float().mean()) if n else 0.0,
        "t3/mean_turns_saved": float(saved.mean()) if saved.numel() else 0.0,
    }

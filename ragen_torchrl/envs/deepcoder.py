"""DeepCoder as a TorchRL chat environment: Python program synthesis against hidden tests.

The rules live in :class:`~ragen_torchrl.envs.games.deepcoder.DeepCoderGame` (pure Python);
:class:`DeepCoderEnv` is the batched :class:`~ragen_torchrl.envs.text_env.TextGameEnv`
around it. The text inside ``<answer>`` is the program (free-form, ``action_names is None``;
a ```` ```python ```` block inside it is taken when present). Every program runs in a
:class:`~ragen_torchrl.envs.games.sandbox.Sandbox` process (time, memory, output and process
limits, no network, no environment variables, an empty temporary directory); the outputs
are compared in the trainer's process.

Rule followed (RAGEN-2, arXiv 2604.06268; the RAGEN reference's ``DeepCoder`` env):
reward = the fraction of **hidden** tests passed (``reward="fraction"``, the reference's
``passed / total``); ``reward="binary"`` pays 1.0 only when every one passes. Public tests are shown and
never counted, nor are hidden tests that repeat them (dropped on load, with a log line; the
reference scores all of a record's tests, having no split); ``success`` when all pass;
one turn (``max_turn: 1``, the reference's setting). ``max_turn > 1`` turns on feedback
turns: an answer that fails a public test is answered with that test's verdict and the
episode goes on; an answer that passes them (or the last one) is graded on the hidden tests.

Data: ``data_path`` is a TACO / LiveCodeBench / PrimeIntellect-style JSON-lines, JSON or
parquet file (see :mod:`~ragen_torchrl.envs.games.deepcoder_data`). **Without data**
(``data_path: null``, the default) the env uses the package's small **hand-written** offline
set (27 problems with reference solutions), so ``ragen-train env=deepcoder`` runs offline;
that set is a smoke test of the pipeline, not the DeepCoder benchmark.

Train/validation split (see :mod:`ragen_torchrl.envs.splits`): a problem is a validation
problem when the hash of its normalised statement is among the ``ceil(val_fraction * n)``
smallest; validation seeds (``[2**30, 2**31)``) get validation problems, every other seed
training ones; with ``val_data_path`` the two files are used whole.

Throughput: a step starts grading the programs of all its rows on ``workers`` background
threads (distinct programs once each, after one process has compiled them all; reports are
cached per program and problem), applies the replies meanwhile (each row waits for its own
program), and returns when every program has finished.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = DeepCoderEnv(num_envs=1)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> reply = env.format_reply("solve", [env.games[0].oracle_action()])
    >>> reply = History(role="assistant", content=reply, batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> out["reward"].item(), out["done"].item(), out["success"].item()
    (1.0, True, True)
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import random
from typing import Any

from tensordict import TensorDictBase

from ..checks import check_bool, check_choice, check_int, check_number
from ..keys import ENV_INDEX, HISTORY_FULL
from .games.base import TextGame
from .games.deepcoder import DeepCoderGame
from .games.deepcoder_data import CodingProblem, load_coding_problems, shipped_problems
from .games.deepcoder_grading import REWARDS, Grader, dedupe_hidden_tests
from .games.sandbox import ISOLATIONS, MAX_MEMORY_MB, MAX_OUTPUT_BYTES, Sandbox, SandboxLimits
from .messages import history_messages
from .parsing import MAX_REPLY_CHARS
from .splits import check_data_paths, check_val_fraction, data_pools, file_stamp, level_split
from .text_env import TextGameEnv

__all__ = ["DeepCoderEnv", "DeepCoderGame", "load_problems"]

SYSTEM_FORMAT = "Reply <think>reasoning</think><answer>```python\nyour code\n```</answer>."


@functools.lru_cache(maxsize=8)
def _load(path: str, stamp: tuple[int, int] | None, num_public: int, limit: int | None) -> tuple[CodingProblem, ...]:
    # cached: the trainer builds a training and a validation env from the same config
    problems = dedupe_hidden_tests(load_coding_problems(path, num_public=num_public, limit=limit), source=path)
    if not problems:
        raise ValueError(f"{path}: no problem has a hidden test that is not also a shown example")
    return tuple(problems)


def load_problems(path: str | os.PathLike, num_public: int = 1, limit: int | None = None) -> tuple[CodingProblem, ...]:
    """Coding problems of a file (cached per path and modification time); hidden tests that
    repeat a shown example are dropped (:func:`dedupe_hidden_tests`).

    Raises:
        ValueError: missing file or malformed record (names the file, the line and the field).

    Example:
        >>> import json, tempfile
        >>> rec = {"prompt": "Echo.", "tests": [{"input": "a\\n", "output": "a\\n"}]}
        >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        ...     _ = f.write(json.dumps(rec) + "\\n")
        >>> len(load_problems(f.name)[0].hidden_tests)
        1
    """
    path = os.path.expanduser(os.fspath(path))
    return _load(path, file_stamp(path), num_public, limit)


class DeepCoderEnv(TextGameEnv):
    """Batched DeepCoder chat env (see the module docstring).

    Args:
        num_envs: batch size.
        data_path: problem file, or ``None`` for the shipped hand-written set.
        val_data_path: optional separate validation file.
        val_fraction: share of problems (by content hash) held out for validation.
        num_public: tests shown as examples when a record has no explicit public/hidden split.
        limit: keep at most this many records of each file.
        timeout_s, memory_mb, max_output_bytes: per-run sandbox limits (:class:`SandboxLimits`).
        isolation: ``"auto"``, ``"bwrap"`` or ``"weak"`` (:class:`Sandbox`).
        workers: threads grading a step's programs in parallel (at most 256).
        reward: ``"fraction"`` (of hidden tests passed, the reference's) or ``"binary"`` (1.0 when all pass).
        skip_after_timeout: a submission's remaining tests fail after its first timeout.
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv` (defaults:
            ``max_turn=1``, ``max_actions_per_turn=1``, ``max_actions_per_traj=max_turn``).

    Example:
        >>> env = DeepCoderEnv(num_envs=2, max_turn=2)
        >>> env.game_factory(3, 0).max_attempts
        2
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        timeout_s: float = 1.0,
        num_public: int = 1,
        data_path: str | os.PathLike | None = None,
        val_data_path: str | os.PathLike | None = None,
        val_fraction: float = 0.1,
        limit: int | None = None,
        memory_mb: int = 512,
        max_output_bytes: int = 1 << 20,
        isolation: str = "auto",
        workers: int = 4,
        skip_after_timeout: bool = True,
        reward: str = "fraction",
        **kwargs: Any,
    ) -> None:
        data_path, val_data_path = check_data_paths(data_path, val_data_path)
        check_val_fraction(val_fraction)
        num_public = check_int("num_public", num_public, minimum=0)
        if limit is not None:
            check_int("limit", limit, minimum=1, expected="a positive integer or null")
        check_number("timeout_s", timeout_s, minimum=0.01, maximum=600)
        check_choice("isolation", isolation, ISOLATIONS)
        check_choice("reward", reward, REWARDS)
        check_int("memory_mb", memory_mb, minimum=64, maximum=MAX_MEMORY_MB)
        check_int("max_output_bytes", max_output_bytes, minimum=1, maximum=MAX_OUTPUT_BYTES)
        check_int("workers", workers, minimum=1, maximum=256)
        check_bool("skip_after_timeout", skip_after_timeout)
        kwargs.setdefault("max_turn", 1)
        kwargs.setdefault("max_actions_per_turn", 1)
        kwargs.setdefault("max_actions_per_traj", kwargs["max_turn"])
        kwargs.setdefault("system_prompt", f"{DeepCoderGame.instructions} {SYSTEM_FORMAT}")
        max_attempts = check_int("max_turn", kwargs["max_turn"], minimum=1, expected="a positive integer")
        self.data_path, self.val_data_path, self.val_fraction = data_path, val_data_path, float(val_fraction)
        limits = SandboxLimits(timeout_s=float(timeout_s), memory_mb=memory_mb, max_output_bytes=max_output_bytes)
        self.grader = Grader(
            Sandbox(limits, isolation=isolation), workers=workers, skip_after_timeout=skip_after_timeout
        )
        if data_path is None:
            pools = _shipped_pools(self.val_fraction)
        else:
            load = functools.partial(load_problems, num_public=num_public, limit=limit)
            pools = data_pools(load, data_path, val_data_path, lambda p: p.key, self.val_fraction)
        assert pools is not None
        self.problems = pools
        grader = self.grader

        def factory(level_seed: int, sample: int) -> DeepCoderGame:
            # deterministic grading: the sample seed is not needed
            pool = pools[level_split(level_seed)]
            return DeepCoderGame(pool[int(level_seed) % len(pool)], grader, max_attempts=max_attempts, reward=reward)

        super().__init__(factory, num_envs=num_envs, **kwargs)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        # start grading the batch's programs in the background; each row's step then waits
        # for its own program (or finds it cached) while the other rows are parsed and rendered
        jobs = []
        try:
            full = tensordict.get(HISTORY_FULL)
            rows = tensordict.get(ENV_INDEX).reshape(-1).tolist()
            for idx, history in zip(rows, full.unbind(0)):
                msgs = history_messages(history)
                reply = msgs[-1][1] if msgs and msgs[-1][0] == "assistant" else ""
                answer = _answer_text(reply[:MAX_REPLY_CHARS])
                game = self.games[idx]
                if answer and isinstance(game, DeepCoderGame):
                    job = game.pending_job(answer)
                    if job is not None:
                        jobs.append(job)
        except Exception:  # the prefetch is an optimisation: the normal step handles any input
            jobs = []
        try:
            futures = self.grader.prefetch(jobs)
        except Exception:  # e.g. no process could start: the rows' own steps meet (and log) it
            futures = []
        try:
            return super()._step(tensordict)
        finally:  # no program outlives the step
            concurrent.futures.wait(futures)

    def demo_turn(
        self, game: TextGame, rng: random.Random, noise: float, actions_left: int, noise_kind: str = "heuristic"
    ) -> tuple[str, bool, int]:
        """One demonstration answer: the reference solution, or with probability ``noise`` a
        program that prints (or returns) a constant: the right I/O shape, a wrong answer."""
        assert isinstance(game, DeepCoderGame)
        answer = game.oracle_action()
        if rng.random() < noise or not answer:
            p = game.problem
            wrong = "print(0)" if p.fn_name is None else f"def {p.fn_name}(*args):\n    return 0"
            if p.fn_name is not None and "class Solution" in (p.solution or p.starter_code):
                wrong = f"class Solution:\n    def {p.fn_name}(self, *args):\n        return 0"
            answer = f"```python\n{wrong}\n```"
        think = game.explain(answer)
        _, done, _ = game.step(answer)
        return self.format_reply(think, [answer]), done, 1


def _answer_text(reply: str) -> str:
    """The ``<answer>`` content the step will most likely parse, found in linear time (the
    full parser's regexes are slow on hostile tag soup, and this guess only warms a cache: a
    wrong guess costs a cache miss, never a wrong reward).

    Example:
        >>> _answer_text("<think>x</think><answer> print(1) </answer>")
        'print(1)'
    """
    start = reply.find("<answer>")
    end = reply.find("</answer>", start + 8) if start >= 0 else -1
    return reply[start + 8 : end].strip() if end >= 0 else ""


@functools.lru_cache(maxsize=4)
def _shipped_pools(val_fraction: float) -> dict[str, tuple[CodingProblem, ...]]:
    problems = dedupe_hidden_tests(shipped_problems(), source="<shipped>")
    pools = data_pools(lambda _: problems, "<shipped>", None, lambda p: p.key, val_fraction)
    assert pools is not None
    return pools

"""SearchQA as a TorchRL chat environment (RAGEN-2's search testbed, arXiv 2604.06268).

The rules live in :class:`~ragen_torchrl.envs.games.searchqa.SearchQAGame` (pure Python);
:class:`SearchQAEnv` is the batched :class:`~ragen_torchrl.envs.text_env.TextGameEnv` around it.
A reply is ``<think>reasoning</think><answer>search[query]</answer>`` or
``<think>reasoning</think><answer>finish[answer]</answer>``: one action per turn, up to 5 turns
(the RAGEN reference's ``max_turn: 5``, ``max_actions_per_turn: 1``). A search shows the top 5 BM25
passages; finish ends the episode with reward 1 for an exact match after SQuAD normalisation, else
the token F1 when it is at least 0.3, else 0 (the reference's reward rule, RLLM's HotpotQA reward);
success is the exact match (the reference also counts F1 credit as success). A reply that is not
exactly one such action (no tags, plain text, ``search[]``, two actions) gets the format penalty
(-0.1) and changes nothing: the reference instead reads unformatted text as an answer.

Data:

* ``data_path: null`` (the default) plays the **generated** offline world of
  :mod:`~ragen_torchrl.envs.games.searchqa_world` (``world_seed``; 300 one-fact passages about
  invented people, cities, countries and companies, 480 questions of one or two hops): a synthetic
  set for offline runs and tests, not a benchmark.
* ``data_path`` (questions: ``question`` + ``answers``/``answer``, NQ / HotpotQA-style JSON lines)
  with ``corpus_path`` (passages: ``id``, ``title``, ``text``) plays your data
  (:mod:`~ragen_torchrl.envs.games.searchqa_data`). The BM25 index (``bm25s``,
  ``pip install ragen_torchrl[search]``) is built once per corpus and cached on disk by content hash
  under ``cache_dir`` (default ``$RAGEN_CACHE`` or ``~/.cache/ragen_torchrl``;
  :mod:`~ragen_torchrl.envs.games.retrieval`).

Train/validation split (see :mod:`ragen_torchrl.envs.splits`): a question is a validation question
when the hash of its normalised text is among the ``ceil(val_fraction * n)`` smallest of its set
(:func:`~ragen_torchrl.envs.splits.split_records`), for the generated world and for a file alike.
Validation seeds (``[2**30, 2**31)``) get validation questions, every other seed training ones
(``questions[split][level_seed % n]``); with ``val_data_path`` the two files are the two splits. The
corpus is shared: held-out questions ask about passages that training questions may also use.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = SearchQAEnv(num_envs=1)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> td["history", "prompt"][0].content[1].startswith("Question: ")
    True
    >>> reply = History(role="assistant", content=env.format_reply("search", ["search[city]"]), batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> out["reward"].item(), out["done"].item(), out["history", "prompt"][0].content[-1].startswith("Results for")
    (0.0, False, True)
"""

from __future__ import annotations

import functools
import os
import random
from typing import Any

from ..checks import check_int, check_number
from ..keys import ACTION_IS_EFFECTIVE, ACTION_IS_VALID, SUCCESS
from .games.base import TextGame
from .games.retrieval import BM25Retriever, Passage
from .games.searchqa import SearchQAGame, parse_action
from .games.searchqa_data import load_corpus, load_questions
from .games.searchqa_world import QAItem, generate_world
from .parsing import parse_response
from .splits import check_data_paths, check_val_fraction, data_pools, file_stamp, level_split, split_records
from .text_env import TextGameEnv

__all__ = ["SearchQAEnv", "SearchQAGame", "load_search_data"]

SYSTEM_FORMAT = (
    "Reply <think>reasoning</think><answer>search[query]</answer> to search, or "
    "<think>reasoning</think><answer>finish[answer]</answer> to answer."
)
INVALID_REPLY = "Invalid reply: use <answer>search[query]</answer> or <answer>finish[answer]</answer>.\n"


def _question_key(item: QAItem) -> str:
    return " ".join(item.question.lower().split())


@functools.lru_cache(maxsize=8)
def _questions(path: str, stamp: Any, limit: int | None) -> tuple[QAItem, ...]:
    return tuple(load_questions(path, limit))


@functools.lru_cache(maxsize=2)
def _corpus(path: str, stamp: Any, limit: int | None) -> tuple[Passage, ...]:
    return tuple(load_corpus(path, limit))


def load_search_data(
    path: str | os.PathLike, kind: str = "questions", limit: int | None = None
) -> tuple[QAItem, ...] | tuple[Passage, ...]:
    """Questions (``kind="questions"``) or passages (``kind="corpus"``) of a file, cached per path
    and modification time (the trainer builds a training and a validation env from one config).

    Example:
        >>> import json, tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        ...     _ = f.write(json.dumps({"id": "p1", "title": "Hamlet", "text": "A play."}) + "\\n")
        >>> load_search_data(f.name, "corpus")
        (Passage(id='p1', title='Hamlet', text='A play.'),)
    """
    if kind not in ("questions", "corpus"):
        raise ValueError(f"kind must be 'questions' or 'corpus', got {kind!r}")
    src = os.path.expanduser(os.fspath(path))
    load = _questions if kind == "questions" else _corpus
    return load(src, file_stamp(src), limit)


class SearchQAEnv(TextGameEnv):
    """Batched SearchQA chat env (see the module docstring).

    Args:
        num_envs: batch size.
        data_path: questions file (JSON lines / JSON / parquet); ``None`` = the generated world.
        corpus_path: passages file; required with ``data_path`` and only with it.
        val_data_path: optional separate validation questions (then ``data_path`` is all training
            data and ``val_fraction`` is ignored).
        val_fraction: share of the questions held out for validation; 0 turns the split off.
        limit: keep at most this many records of each file (``None``: all).
        world_seed: seed of the generated world (``data_path: null``).
        max_hops: generated questions of at most this many hops (1 or 2).
        top_k: passages shown per search (reference: 5).
        passage_chars: each shown passage is cut to this many characters.
        f1_threshold: token F1 below this scores 0 (reference: 0.3).
        cache_dir: BM25 index cache (``None``: ``$RAGEN_CACHE`` or ``~/.cache/ragen_torchrl``).
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv` (defaults:
            ``max_turn=5``, ``max_actions_per_turn=1``, ``max_actions_per_traj=5``); a reply is one
            action whatever ``max_actions_per_turn`` says.

    Raises:
        ValueError: a bad argument (named), a missing or malformed file (file, line and field named).
        ImportError: ``bm25s`` is not installed (``pip install ragen_torchrl[search]``).

    Example:
        >>> env = SearchQAEnv(num_envs=2, max_hops=1)
        >>> len(env.game_factory(3, 0).item.hops)
        1
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        data_path: str | os.PathLike | None = None,
        corpus_path: str | os.PathLike | None = None,
        val_data_path: str | os.PathLike | None = None,
        val_fraction: float = 0.1,
        limit: int | None = None,
        world_seed: int = 0,
        max_hops: int = 2,
        top_k: int = 5,
        passage_chars: int = 300,
        f1_threshold: float = 0.3,
        cache_dir: str | os.PathLike | None = None,
        **kwargs: Any,
    ) -> None:
        data_path, val_data_path = check_data_paths(data_path, val_data_path, training="the training questions")
        if corpus_path is not None and (not isinstance(corpus_path, (str, os.PathLike)) or not os.fspath(corpus_path)):
            raise ValueError(f"corpus_path must be a file path or null, got {corpus_path!r}")
        if (data_path is None) != (corpus_path is None):
            raise ValueError(
                "data_path (questions) and corpus_path (passages) go together: give both, or neither for the "
                f"generated world; got data_path={data_path!r}, corpus_path={corpus_path!r}"
            )
        check_val_fraction(val_fraction)
        if limit is not None:
            check_int("limit", limit, minimum=1, expected="a positive integer or null")
        check_int("world_seed", world_seed, minimum=0)
        check_int("max_hops", max_hops, minimum=1, maximum=2)
        check_int("top_k", top_k, minimum=1, maximum=50)
        check_int("passage_chars", passage_chars, minimum=20, maximum=100_000)
        f1_threshold = check_number("f1_threshold", f1_threshold, minimum=0.0, maximum=1.0)
        if cache_dir is not None and (not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir)):
            raise ValueError(f"cache_dir must be a directory path or null, got {cache_dir!r}")
        kwargs.setdefault("max_turn", 5)
        kwargs.setdefault("max_actions_per_turn", 1)
        kwargs.setdefault("max_actions_per_traj", kwargs["max_turn"])
        budget = f"Each search shows the {top_k} best passages; you have {kwargs['max_turn']} turns."
        kwargs.setdefault("system_prompt", f"{SearchQAGame.instructions} {budget} {SYSTEM_FORMAT}")
        self.data_path, self.corpus_path, self.val_data_path = data_path, corpus_path, val_data_path
        self.val_fraction = float(val_fraction)

        if data_path is None:
            world = generate_world(world_seed)
            passages = world.passages
            items = tuple(q for q in world.questions if len(q.hops) <= max_hops)
            train, val = split_records(items, _question_key, self.val_fraction, f"the generated world {world_seed}")
            self.questions = {"train": tuple(train), "val": tuple(val)}
        else:
            passages = load_search_data(corpus_path, "corpus", limit)
            self.questions = data_pools(
                lambda path: load_search_data(path, "questions", limit),
                data_path,
                val_data_path,
                _question_key,
                self.val_fraction,
            )
        self.retriever = BM25Retriever(passages, cache_dir=cache_dir)
        questions, retriever = self.questions, self.retriever

        def factory(level_seed: int, sample: int) -> SearchQAGame:
            # deterministic given the level: the sample seed is not needed
            pool = questions[level_split(level_seed)]
            return SearchQAGame(
                pool[int(level_seed) % len(pool)],
                retriever,
                top_k=top_k,
                passage_chars=passage_chars,
                f1_threshold=f1_threshold,
            )

        super().__init__(factory, num_envs=num_envs, **kwargs)

    def _apply_reply(self, idx: int, game: TextGame, reply: str) -> tuple[float, bool, dict[str, Any], str]:
        """One action per reply: ``search[...]`` or ``finish[...]`` inside ``<answer>``; anything else
        gets the format penalty and leaves the game unchanged."""
        parsed = parse_response(reply, None, 1, reply_format=self.reply_format)
        budget = self.max_actions_per_traj - self._actions_used[idx]
        if not parsed.format_ok or parse_action(parsed.answer) is None or budget <= 0:
            return self.format_penalty, False, {}, INVALID_REPLY
        reward, finished, info = game.step(parsed.answer)
        self._actions_used[idx] += 1
        fields = {ACTION_IS_VALID: True, ACTION_IS_EFFECTIVE: bool(info.get("action_is_effective", False))}
        if finished:
            fields[SUCCESS] = bool(info.get("success", False))
        return reward, finished, fields, ""

    def demo_turn(
        self, game: TextGame, rng: random.Random, noise: float, actions_left: int, noise_kind: str = "uniform"
    ) -> tuple[str, bool, int]:
        """One demonstration turn: the oracle's action, or with probability ``noise`` a search for an
        unrelated passage (when the turns left still allow the oracle's path afterwards) or a wrong
        answer. ``noise_kind`` is accepted and ignored (there is no biased heuristic)."""
        assert isinstance(game, SearchQAGame)
        action = game.oracle_action()
        if rng.random() < noise:
            needed = len(game.missing_hops()) + 1 + (0 if game.item.hops or game.queries else 1)
            action = game.noisy_action(rng, can_recover=actions_left > needed)
        think = game.explain(action)
        _, done, _ = game.step(action)
        return self.format_reply(think, [action]), done, 1

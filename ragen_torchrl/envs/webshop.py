"""WebShop as a TorchRL chat environment.

The shop simulator lives in :class:`~ragen_torchrl.envs.games.webshop.WebShopGame` (pure Python:
search page, paged BM25 results, item page with options, description/features, back, buy);
:class:`WebShopEnv` is the batched :class:`~ragen_torchrl.envs.text_env.TextGameEnv` around it.

Reply format: ``<think>...</think><answer>search[keywords]</answer>`` or ``<answer>click[element]</answer>``
(one action per turn, as RAGEN; with ``max_actions_per_turn > 1`` actions are split by ``||``). A reply
without the tags gets the format penalty; an action the page does not offer (``click`` on something
not listed, ``search`` outside the search page, any other text) gets the format penalty too and leaves
the state unchanged (WebShop ignores invalid actions). The observation lists the clickable elements
(``observation="compact"``, the default: each once as ``[element]``, the instruction on the search page;
``"webshop"``: WebShop's ``[SEP]`` page text with the instruction on every page and RAGEN's
"Available actions" list, about 1.6x the tokens).

Rules followed (stated, RAGEN-2 arXiv 2604.06268 and its reference WebShop setting): **9 turns**, one
action per turn, 9 actions per episode (RAGEN's ``max_turn: 9``, ``max_actions_per_traj: 9``); reward
**binary**: 1 when WebShop's purchase score (``get_reward`` of Yao et al., 2022, arXiv 2207.01206:
attribute, option, price and type matching, see :mod:`~ragen_torchrl.envs.games.webshop_reward`) is 1,
else 0 (RAGEN: ``reward = 1.0 if raw_reward >= 1.0 else 0.0``); success = score 1. The score itself is
in the game's step info (``info["score"]``) and on ``env.games[i].score`` after a purchase;
``reward_mode="score"`` pays the score instead (WebShop's own reward).

Data: **without files** (the default) the env uses the package's GENERATED catalogue
(:mod:`~ragen_torchrl.envs.games.webshop_catalog`: 3000 invented products, deterministic in
``catalog_seed``, one generated instruction each). That is a synthetic stand-in for the WebShop
benchmark, not the benchmark. With the user's WebShop files (:mod:`~ragen_torchrl.envs.games.webshop_data`):
``catalog_path`` (``items_shuffle*.json``), ``attributes_path`` (``items_ins_v2*.json``) and
``data_path`` (goals: ``items_human_ins.json`` or goal records; without it, WebShop's synthetic goals
from the attribute file's instructions).

Train/validation split (see :mod:`ragen_torchrl.envs.splits`): a goal is a validation goal when the hash
of its normalised instruction text is among the ``ceil(val_fraction * n)`` smallest; validation seeds
(``[2**30, 2**31)``) get validation goals, every other seed training goals (``level_seed % n``). With
``val_data_path`` the two goal files are used whole for each split. The catalogue is shared.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = WebShopEnv(num_envs=1, num_products=300)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> reply = History(role="assistant", content=env.format_reply("look", ["click[buy now]"]), batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> out["reward"].item(), out["action_is_valid"].item(), out["done"].item()
    (-0.10000000149011612, False, False)
"""

from __future__ import annotations

import functools
import os
import random
from typing import Any

from ..checks import check_choice, check_int
from ..keys import ACTION_IS_VALID
from .games.base import TextGame
from .games.webshop import OBSERVATIONS, REWARD_MODES, SEARCH_RETURN_N, Shop, WebShopGame
from .games.webshop_catalog import generate_catalog, generate_goals
from .games.webshop_data import load_attributes, load_goals, load_products, synthetic_goals
from .games.webshop_reward import Goal
from .games.webshop_search import require_bm25s
from .parsing import parse_response
from .splits import check_data_paths, check_val_fraction, file_stamp, level_split, split_records
from .text_env import TextGameEnv

__all__ = ["WebShopEnv", "WebShopGame", "load_shop"]

SYSTEM_FORMAT = (
    "Reply <think>reasoning</think><answer>one action</answer>, e.g. <answer>search[red cotton t-shirt]</answer>."
)
INVALID_ACTION = "Invalid action: use one of the available actions.\n"
#: products of the generated catalogue when ``num_products`` is null
DEFAULT_PRODUCTS = 3000


def _check_path(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ValueError(f"{name} must be a file path or null, got {value!r}")
    return os.fspath(value)


def _goal_key(goal: Goal) -> str:
    return " ".join(goal.instruction.lower().split())


@functools.lru_cache(maxsize=4)
def _load(
    catalog_path: str | None,
    attributes_path: str | None,
    data_path: str | None,
    val_data_path: str | None,
    num_products: int | None,
    catalog_seed: int,
    search_return_n: int,
    val_fraction: float,
    stamps: tuple,
) -> tuple[Shop, dict[str, tuple[Goal, ...]]]:
    # cached: the trainer builds a training and a validation env from one config (one index)
    attributes = load_attributes(attributes_path) if attributes_path else None
    if catalog_path is None:
        products = generate_catalog(num_products or DEFAULT_PRODUCTS, catalog_seed)
    else:
        products = tuple(load_products(catalog_path, attributes, limit=num_products))
    shop = Shop(products, search_return_n)
    if data_path is not None:
        goals = tuple(load_goals(data_path, products))
    elif attributes is not None:
        goals = tuple(synthetic_goals(products, attributes, attributes_path or ""))
    else:
        goals = generate_goals(products, catalog_seed)
    if val_data_path is not None:
        return shop, {"train": goals, "val": tuple(load_goals(val_data_path, products))}
    train, val = split_records(goals, _goal_key, val_fraction, data_path or attributes_path or "the generated goals")
    return shop, {"train": tuple(train), "val": tuple(val)}


def load_shop(
    catalog_path: str | None = None,
    attributes_path: str | None = None,
    data_path: str | None = None,
    val_data_path: str | None = None,
    *,
    num_products: int | None = None,
    catalog_seed: int = 0,
    search_return_n: int = SEARCH_RETURN_N,
    val_fraction: float = 0.1,
) -> tuple[Shop, dict[str, tuple[Goal, ...]]]:
    """The shop and its ``{"train", "val"}`` goal pools (cached per arguments and file modification times).

    Example:
        >>> shop, goals = load_shop(num_products=200)
        >>> len(shop.products), len(goals["train"]) + len(goals["val"])
        (200, 200)
    """
    paths = (catalog_path, attributes_path, data_path, val_data_path)
    return _load(*paths, num_products, catalog_seed, search_return_n, val_fraction, tuple(file_stamp(p) for p in paths))


class WebShopEnv(TextGameEnv):
    """Batched WebShop chat env.

    Args:
        num_envs: batch size.
        catalog_path: WebShop product file (``items_shuffle*.json``); ``None`` = the generated catalogue.
        attributes_path: WebShop attribute file (``items_ins_v2*.json``; needs ``catalog_path``).
        data_path: goal file (``items_human_ins.json`` or goal records); ``None`` = generated goals, or
            WebShop's synthetic goals from ``attributes_path``.
        val_data_path: optional separate validation goal file (needs ``data_path``).
        val_fraction: share of goals (by instruction hash) held out for validation.
        num_products: size of the generated catalogue (``None``: 3000), or the first products of
            ``catalog_path`` to keep (``None``: all; WebShop's ``num_products``).
        catalog_seed: seed of the generated catalogue and goals.
        search_return_n: results of a search (WebShop: 50; 10 per page).
        reward_mode: ``"binary"`` (1 when the score is 1: RAGEN) or ``"score"`` (WebShop's score).
        observation: ``"compact"`` (each clickable once as ``[element]``; short prompts) or ``"webshop"``
            (WebShop's ``[SEP]`` text with the instruction on every page, plus RAGEN's available-actions list).
        **kwargs: turn/action limits and format penalty of :class:`TextGameEnv` (defaults RAGEN's:
            ``max_turn=9``, ``max_actions_per_turn=1``, ``max_actions_per_traj=9``).

    Raises:
        ValueError: a bad argument (named), or a data-file error naming the file, record and fields.
        ImportError: ``bm25s`` missing (the message says ``pip install ragen_torchrl[search]``).

    Example:
        >>> env = WebShopEnv(num_envs=2, num_products=300)
        >>> env.max_turn, len(env.goals["val"]) > 0
        (9, True)
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        catalog_path: str | os.PathLike | None = None,
        attributes_path: str | os.PathLike | None = None,
        data_path: str | os.PathLike | None = None,
        val_data_path: str | os.PathLike | None = None,
        val_fraction: float = 0.1,
        num_products: int | None = None,
        catalog_seed: int = 0,
        search_return_n: int = SEARCH_RETURN_N,
        reward_mode: str = "binary",
        observation: str = "compact",
        **kwargs: Any,
    ) -> None:
        data_path, val_data_path = check_data_paths(data_path, val_data_path, training="the training goals")
        catalog_path, attributes_path = (
            _check_path("catalog_path", catalog_path),
            _check_path("attributes_path", attributes_path),
        )
        if attributes_path is not None and catalog_path is None:
            raise ValueError("attributes_path needs catalog_path (the WebShop product file) as well")
        check_val_fraction(val_fraction)
        if num_products is not None:
            check_int("num_products", num_products, minimum=1, expected="a positive integer or null")
        check_int("catalog_seed", catalog_seed, minimum=0, expected="a non-negative integer")
        check_int("search_return_n", search_return_n, minimum=1, maximum=1000)
        check_choice("reward_mode", reward_mode, REWARD_MODES)
        check_choice("observation", observation, OBSERVATIONS)
        # fail here, not at the first search inside a rollout (where the env's safety net would
        # turn the ImportError into ended rows)
        require_bm25s()
        kwargs.setdefault("max_turn", 9)
        kwargs.setdefault("max_actions_per_turn", 1)
        kwargs.setdefault("max_actions_per_traj", kwargs["max_turn"])
        kwargs.setdefault("system_prompt", f"{WebShopGame.instructions} {SYSTEM_FORMAT}")
        self.shop, self.goals = load_shop(
            catalog_path,
            attributes_path,
            data_path,
            val_data_path,
            num_products=num_products,
            catalog_seed=catalog_seed,
            search_return_n=search_return_n,
            val_fraction=float(val_fraction),
        )
        self.reward_mode = reward_mode
        shop, goals = self.shop, self.goals

        def factory(level_seed: int, sample: int) -> WebShopGame:
            pool = goals[level_split(level_seed)]
            return WebShopGame(
                pool[int(level_seed) % len(pool)], shop, reward_mode=reward_mode, observation=observation
            )

        super().__init__(factory, num_envs=num_envs, **kwargs)

    def _apply_reply(self, idx: int, game: TextGame, reply: str) -> tuple[float, bool, dict[str, Any], str]:
        """Run the reply's actions (the first ``max_actions_per_turn`` split by ``||``); an action the
        page does not offer takes its slot, changes nothing and costs the format penalty once per turn."""
        assert isinstance(game, WebShopGame)
        parsed = parse_response(reply, None, 1, reply_format=self.reply_format)
        tokens = [t.strip() for t in parsed.answer.split("||") if t.strip()][: self.max_actions_per_turn]
        if not parsed.format_ok or not tokens:
            return self.format_penalty, False, {}, "Invalid reply.\n"
        budget = max(self.max_actions_per_traj - self._actions_used[idx], 0)
        reward, finished, fields, rejected = self._run_actions(idx, game, tokens[:budget], accept=game.is_available)
        invalid = rejected > 0
        fields[ACTION_IS_VALID] = not invalid
        if invalid:
            reward += self.format_penalty
        return reward, finished, fields, INVALID_ACTION if invalid and not finished else ""

    def demo_turn(
        self, game: TextGame, rng: random.Random, noise: float, actions_left: int, noise_kind: str = "uniform"
    ) -> tuple[str, bool, int]:
        """One demonstration action: the oracle's, or with probability ``noise`` a random available
        action (``noise_kind="uniform"``) or the hasty shopper's (``"heuristic"``: first result, buy
        without options). The oracle recovers from any page (back, previous page, new search)."""
        assert isinstance(game, WebShopGame)
        action = game.oracle_action()
        if rng.random() < noise:
            action = game.greedy_action() if noise_kind == "heuristic" else game.random_action(rng)
        think = game.explain(action)
        _, done, _ = game.step(action)
        return self.format_reply(think, [action]), done, 1

"""WebShop: find and buy the product an instruction describes (pure Python, no torch).

A self-contained shop simulator with WebShop's page structure (Yao et al., 2022, arXiv 2207.01206;
RAGEN-2, arXiv 2604.06268, uses it as one of its seven environments):

* **search** page: the instruction and a search box: ``search[<query>]`` (only here);
* **results** page: BM25 results (at most ``search_return_n`` = 50, WebShop's ``SEARCH_RETURN_N``),
  10 per page: ``click[<asin>]``, ``click[next >]``, ``click[< prev]``, ``click[back to search]``;
* **item** page: title, price, option groups (colour, size...): ``click[<option value>]`` selects a
  value, ``click[description]`` / ``click[features]`` open the sub-pages, ``click[< prev]`` returns to
  the results, ``click[buy now]`` buys the item with the chosen options and ends the episode;
* **description** / **features** sub-pages: ``click[< prev]`` returns to the item.

WebShop's Reviews page (empty: its loader reads no reviews) and Attributes page (off by default,
``show_attrs=False``) are not offered.

Observations (``observation=``): ``"compact"`` (default) shows each page with every clickable once as
``[element]`` and the instruction on the search page (the conversation keeps it); ``"webshop"`` is
WebShop's text observation (elements joined by ``[SEP]``, the instruction on every page) followed by
RAGEN's "Available actions" list. Both list exactly the clickables of :meth:`WebShopGame.clickables`.

Actions are WebShop's ``search[...]`` and ``click[...]`` (case-insensitive, whitespace collapsed).
An action the current page does not offer (or any other text) is *invalid*: the state is unchanged,
the reward is 0 and ``info["action_is_valid"]`` is False (the env adds the format penalty). Opening a
product clears the options chosen on the previous one.

Reward: on ``buy now`` the purchase gets WebShop's score in [0, 1]
(:func:`~ragen_torchrl.envs.games.webshop_reward.purchase_score`: attribute, option, price and type
matching), logged as ``info["score"]``; the reward is **binary**, 1.0 when the score is 1 and 0.0
otherwise (RAGEN's rule), unless ``reward_mode="score"`` pays the score itself. Success = score 1.

Example:
    >>> from ragen_torchrl.envs.games.webshop_catalog import generate_catalog, generate_goals
    >>> shop = Shop(generate_catalog(200, seed=0))
    >>> game = WebShopGame(generate_goals(shop.products)[0], shop)
    >>> game.available_actions()
    ['search[<query>]']
    >>> game.step("click[buy now]")[2]["action_is_valid"]
    False
    >>> while not game.done:
    ...     reward, done, info = game.step(game.oracle_action())
    >>> reward, info["score"], game.success
    (1.0, 1.0, True)
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from ragen_torchrl.envs.games.base import TextGame
from ragen_torchrl.envs.games.webshop_reward import Goal, Product, option_matches, purchase_score, token_set_ratio
from ragen_torchrl.envs.games.webshop_search import BM25Index

__all__ = ["Shop", "WebShopGame", "parse_action", "PAGE_SIZE", "SEARCH_RETURN_N", "REWARD_MODES", "OBSERVATIONS"]

#: results per page (WebShop's ``PRODUCT_WINDOW``)
PAGE_SIZE = 10
#: results a search returns (WebShop's ``SEARCH_RETURN_N``)
SEARCH_RETURN_N = 50
REWARD_MODES = ("binary", "score")
#: ``compact``: each page's text with every clickable shown once as ``[element]`` and the instruction on
#: the search page (short prompts for small models); ``webshop``: WebShop's text observation (elements
#: joined by ``[SEP]``, the instruction on every page) followed by RAGEN's list of available actions
OBSERVATIONS = ("compact", "webshop")
BACK, PREV, NEXT, BUY = "back to search", "< prev", "next >", "buy now"
SUB_PAGES = ("description", "features")
#: searches remembered per shop (the oracle and groups of samples repeat queries)
_CACHE_SIZE = 4096
_PRICE_CLAUSE = re.compile(r",?\s*and price lower than.*$")
_OPTION_CLAUSE = re.compile(r"\s+with\s+[a-z][a-z ]*:.*$")
_OPENER = re.compile(
    r"^(?:please\s+)?(?:i am looking for|i'm looking for|looking for|i need|find me|i want to buy|i want|find|buy)\s+(?:an?\s+)?"
)


def parse_action(text: Any) -> tuple[str, str] | None:
    """``(name, argument)`` of ``search[...]`` / ``click[...]`` (lowercase, spaces collapsed), else None.

    Example:
        >>> parse_action(" Click[ Buy  Now ] "), parse_action("search[red mug]"), parse_action("buy")
        (('click', 'buy now'), ('search', 'red mug'), None)
    """
    if not isinstance(text, str):
        return None
    text = text.strip()
    start = text.find("[")
    if start <= 0 or not text.endswith("]"):
        return None
    name = text[:start].strip().lower()
    arg = " ".join(text[start + 1 : -1].split()).lower()
    if name not in ("search", "click") or not arg:
        return None
    return name, arg


class Shop:
    """The products, their BM25 index (built on first search) and a lookup by asin.

    Example:
        >>> from ragen_torchrl.envs.games.webshop_catalog import generate_catalog
        >>> shop = Shop(generate_catalog(100, seed=0))
        >>> hits = shop.search("fast charging power bank")
        >>> 0 < len(hits) <= SEARCH_RETURN_N and "Power Bank" in hits[0].title
        True
    """

    def __init__(self, products: Sequence[Product], search_return_n: int = SEARCH_RETURN_N) -> None:
        self.products = tuple(products)
        self.by_asin = {p.asin.lower(): p for p in self.products}
        self.search_return_n = int(search_return_n)
        self._index: BM25Index | None = None
        self._cache: dict[str, tuple[Product, ...]] = {}

    @property
    def index(self) -> BM25Index:
        if self._index is None:
            self._index = BM25Index([p.search_text() for p in self.products])
        return self._index

    def search(self, query: str) -> tuple[Product, ...]:
        """The best ``search_return_n`` products for ``query`` (cached)."""
        hits = self._cache.get(query)
        if hits is None:
            hits = tuple(self.products[i] for i in self.index.search(query, self.search_return_n))
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[query] = hits
        return hits


class WebShopGame(TextGame):
    """One shopping episode for ``goal`` in ``shop`` (see the module docstring for pages and rules)."""

    action_names = None
    instructions = (
        "You are browsing an online shop. Buy the product that matches the instruction: search, open a "
        "product, choose its options (colour, size...) and buy it. Actions: search[keywords] on the search "
        "page, click[element] for an element shown as [element]."
    )

    def __init__(self, goal: Goal, shop: Shop, *, reward_mode: str = "binary", observation: str = "compact") -> None:
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {', '.join(REWARD_MODES)}, got {reward_mode!r}")
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {', '.join(OBSERVATIONS)}, got {observation!r}")
        self.goal, self.shop, self.reward_mode, self.observation = goal, shop, reward_mode, observation
        self.page = "search"
        self.query = ""
        self.results: tuple[Product, ...] = ()
        self.page_no = 1
        self.product: Product | None = None
        self.chosen: dict[str, str] = {}
        self.note = ""
        self.done = False
        self.score: float | None = None
        self.score_info: dict[str, Any] = {}
        self._success = False
        self._tried: list[str] = []
        self._plans: dict[str, tuple[float, dict[str, str]]] = {}

    # ------------------------------------------------------------------ pages
    def _num_pages(self) -> int:
        return max(1, -(-len(self.results) // PAGE_SIZE))

    def _page_items(self) -> tuple[Product, ...]:
        start = (self.page_no - 1) * PAGE_SIZE
        return self.results[start : start + PAGE_SIZE]

    def _option_lookup(self) -> dict[str, str]:
        # option value -> option name; a value in two groups selects the later one (as WebShop)
        assert self.product is not None
        return {v: name for name, values in self.product.options.items() for v in values}

    def clickables(self) -> list[str]:
        """The click targets of the current page (lowercase), in page order."""
        if self.done or self.page == "search":
            return []
        if self.page == "results":
            out = [BACK] + ([PREV] if self.page_no > 1 else []) + ([NEXT] if self.page_no < self._num_pages() else [])
            return out + [p.asin.lower() for p in self._page_items()]
        if self.page == "item":
            return [BACK, PREV, *SUB_PAGES, BUY, *self._option_lookup()]
        return [BACK, PREV]

    def available_actions(self) -> list[str]:
        """The actions of the current page as the model should write them."""
        search = ["search[<query>]"] if self.page == "search" and not self.done else []
        return search + [f"click[{c}]" for c in self.clickables()]

    def _price(self, p: Product) -> str:
        return p.price_text or f"${p.price:.2f}"

    def _webshop_body(self) -> str:
        # WebShop's text observation: page elements joined by [SEP]
        if self.page == "search":
            return "Search"
        if self.page == "results":
            head = ["Back to Search", f"Page {self.page_no} (Total results: {len(self.results)})"]
            head += ["< Prev"] if self.page_no > 1 else []
            head += ["Next >"] if self.page_no < self._num_pages() else []
            items = [f"{p.asin} [SEP] {p.title} [SEP] {self._price(p)}" for p in self._page_items()]
            return " [SEP] ".join(head + (items or ["No results."]))
        p = self.product
        assert p is not None
        if self.page == "description":
            return f"Back to Search [SEP] < Prev [SEP] {p.description or 'No description.'}"
        if self.page == "features":
            return " [SEP] ".join(["Back to Search", "< Prev", *(p.bullets or ("No features.",))])
        parts = ["Back to Search", "< Prev"]
        for name, values in p.options.items():
            parts += [name, *values]
        parts += [p.title, f"Price: {self._price(p)}", "Rating: N.A.", "Description", "Features", "Buy Now"]
        if self.chosen:
            parts.append("Selected: " + ", ".join(f"{k}: {v}" for k, v in self.chosen.items()))
        return " [SEP] ".join(parts)

    def _compact_body(self) -> str:
        # the same pages, each clickable shown once as [element]
        if self.page == "search":
            return f"Instruction: {self.goal.instruction}\nSearch page: search[<keywords>]"
        nav = " ".join(f"[{c}]" for c in self.clickables() if c in (BACK, PREV, NEXT, *SUB_PAGES, BUY))
        if self.page == "results":
            head = f"Results page {self.page_no}/{self._num_pages()} ({len(self.results)} results). {nav}"
            items = [f"[{p.asin.lower()}] {p.title} {self._price(p)}" for p in self._page_items()]
            return "\n".join([head, *(items or ["No results."])])
        p = self.product
        assert p is not None
        if self.page == "description":
            return f"Description: {p.description or 'none.'} {nav}"
        if self.page == "features":
            return f"Features: {'; '.join(p.bullets) or 'none.'} {nav}"
        lines = [f"{p.title} {self._price(p)}. {nav}"]
        lines += [f"{name}: " + " ".join(f"[{v}]" for v in values) for name, values in p.options.items()]
        if self.chosen:
            lines.append("Selected: " + ", ".join(f"{k}: {v}" for k, v in self.chosen.items()))
        return "\n".join(lines)

    def render_text(self) -> str:
        if self.done:
            return f"Thank you for shopping with us! Your score (min 0.0, max 1.0): {self.score:.2f}"
        if self.observation == "compact":
            return f"{self.note}{self._compact_body()}"
        text = f"{self.note}Instruction: [SEP] {self.goal.instruction} [SEP] {self._webshop_body()}"
        return f"{text}\nAvailable actions: {', '.join(self.available_actions())}"

    # ------------------------------------------------------------------ dynamics
    def _state(self) -> tuple:
        return (self.page, self.query, self.page_no, self.product, tuple(self.chosen.items()), self.done)

    def is_available(self, action: str) -> bool:
        """Whether ``action`` is a valid action on the current page."""
        parsed = parse_action(action)
        if parsed is None or self.done:
            return False
        name, arg = parsed
        return self.page == "search" if name == "search" else arg in self.clickables()

    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        if not self.is_available(action):
            info = {"success": self._success, "action_is_effective": False, "action_is_valid": False}
            return 0.0, self.done, info | ({"score": self.score} if self.done else {})
        name, arg = parse_action(action)  # type: ignore[misc]
        before = self._state()
        self.note = ""
        reward = 0.0
        if name == "search":
            self.page, self.query, self.page_no = "results", arg, 1
            self.results = self.shop.search(arg)
        elif arg == BACK:
            self.page, self.query, self.results, self.product, self.chosen = "search", "", (), None, {}
        elif arg == NEXT:
            self.page_no += 1
        elif arg == PREV:
            if self.page == "results":
                self.page_no -= 1
            else:
                self.page = "results" if self.page == "item" else "item"
        elif self.page == "results":
            self.page, self.product, self.chosen = "item", self.shop.by_asin[arg], {}
        elif arg in SUB_PAGES:
            self.page = arg
        elif arg == BUY:
            assert self.product is not None
            self.score, self.score_info = purchase_score(self.product, self.goal, list(self.chosen.values()))
            self.done = True
            self._success = self.score >= 1.0 - 1e-9
            reward = self.score if self.reward_mode == "score" else float(self._success)
        else:
            self.chosen[self._option_lookup()[arg]] = arg
            self.note = f"You have clicked {arg}.\n"
        info = {"success": self._success, "action_is_effective": self._state() != before, "action_is_valid": True}
        if self.done:
            info.update(score=self.score, **self.score_info)
        return reward, self.done, info

    def progress(self) -> float:
        """Steps from the search page to a purchase: 3 on the search page, 2 on results, 1 on an
        item (or its sub-pages), 0 once bought (lower is closer)."""
        return 0.0 if self.done else {"search": 3.0, "results": 2.0}.get(self.page, 1.0)

    # ------------------------------------------------------------------ oracle
    def oracle_query(self) -> str:
        """The instruction without its opening words, option and price clauses (``i need a cotton
        t-shirt with size: m, and price lower than 30.00 dollars`` -> ``cotton t-shirt``); the goal
        product's title when that search found nothing before."""
        head = _OPTION_CLAUSE.sub("", _PRICE_CLAUSE.sub("", self.goal.instruction.lower())).strip()
        head = _OPENER.sub("", head)
        if head in self._tried and self.goal.name:
            return " ".join(self.goal.name.lower().split())
        return head or self.goal.name.lower()

    def _plan(self, product: Product) -> tuple[float, dict[str, str]]:
        """The best score ``product`` can reach and the option choice that reaches it."""
        if product.asin not in self._plans:
            plan: dict[str, str] = {}
            for wanted in self.goal.options:
                best = max(
                    ((token_set_ratio(v, wanted), n, v) for n, vs in product.options.items() for v in vs),
                    default=None,
                )
                if best is not None and option_matches([best[2]], [wanted]) and best[1] not in plan:
                    plan[best[1]] = best[2]
            self._plans[product.asin] = (purchase_score(product, self.goal, list(plan.values()))[0], plan)
        return self._plans[product.asin]

    def _target(self) -> int | None:
        """Index in the results of the product the oracle buys: the first that can reach score 1, else
        the best one."""
        if not self.results:
            return None
        scores = [self._plan(p)[0] for p in self.results]
        best = max(scores)
        return next(i for i, s in enumerate(scores) if s >= min(best, 1.0 - 1e-9))

    def oracle_action(self) -> str:
        if self.done:
            return f"click[{BUY}]"
        if self.page == "search":
            query = self.oracle_query()
            return f"search[{query}]"
        if self.page == "results":
            target = self._target()
            if target is None:
                self._tried.append(self.query)
                return f"click[{BACK}]"
            page = target // PAGE_SIZE + 1
            if page == self.page_no:
                return f"click[{self.results[target].asin.lower()}]"
            return f"click[{NEXT if page > self.page_no else PREV}]"
        if self.page in SUB_PAGES:
            return f"click[{PREV}]"
        assert self.product is not None
        target = self._target()
        if target is not None and self.results[target].asin != self.product.asin:
            return f"click[{PREV}]"
        for name, value in self._plan(self.product)[1].items():
            if self.chosen.get(name) != value:
                return f"click[{value}]"
        return f"click[{BUY}]"

    def greedy_action(self) -> str:
        """A hasty shopper: the first result, then buy at once without choosing options."""
        if self.page == "results" and self._page_items():
            return f"click[{self._page_items()[0].asin.lower()}]"
        if self.page == "item":
            return f"click[{BUY}]"
        return self.oracle_action()

    def random_action(self, rng: random.Random) -> str:
        """A uniformly random available action (a search repeats the oracle's query)."""
        actions = self.available_actions()
        action = rng.choice(actions) if actions else f"click[{BUY}]"
        return f"search[{self.oracle_query()}]" if action.startswith("search[") else action

    def explain(self, action: str) -> str:
        parsed = parse_action(action)
        if parsed is None:
            return "I am not sure what to do."
        name, arg = parsed
        if name == "search":
            return f"I search for {arg}."
        if arg == BUY:
            return "The options are set, so I buy it." if self.chosen else "I buy this product."
        if arg == NEXT:
            return f"No good match on page {self.page_no}; next page."
        if arg in (PREV, BACK):
            return "This is not what I need; I go back."
        if arg in SUB_PAGES:
            return f"I read the {arg}."
        if self.page == "results" and arg in self.shop.by_asin:
            product = self.shop.by_asin[arg]
            return f"{product.title} at {product.price_text or product.price} fits."
        return f"The instruction asks for {arg}."

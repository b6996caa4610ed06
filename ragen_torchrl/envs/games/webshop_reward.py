"""WebShop's purchase score: attribute, option, price and product-type matching (pure Python).

The score of buying ``product`` with the chosen ``options`` for a :class:`Goal` follows WebShop's
``get_reward`` (Yao et al., 2022, arXiv 2207.01206, section 3 and ``web_agent_site/engine/goal.py``):

``score = r_type * (attribute matches + option matches + price ok) / (#goal attributes + #goal options + 1)``

* **attributes**: a goal attribute matches when a product attribute is a fuzzy match
  (:func:`token_set_ratio` > 85), or else when it occurs verbatim in the lowercased title, features
  (joined by spaces) or description;
* **options**: a goal option value matches when a chosen option value is a fuzzy match after
  :func:`normalize_color` (both sides reduced to the first colour word they contain);
* **price**: 1 when the product's price is ``<= price_upper``;
* **type** ``r_type``: 1.0 when the product's search query equals the goal's, or at least two levels of
  their category paths agree (compared as written, case included), or the title overlap is above 0.2;
  else 0.5; then 0.1 when the title overlap is below 0.1 and 0.0 when it is 0. The title overlap is the
  share of the goal title's nouns that the bought title also has. WebShop tags nouns with spaCy; this
  package has no spaCy, so the *content words* of a title (lowercased words of letters and digits in
  any script, stopwords removed) stand in for its nouns.

:func:`token_set_ratio` is ``fuzz.token_set_ratio`` of ``thefuzz`` 0.19.0, the version WebShop pins,
without ``python-Levenshtein`` (not in WebShop's requirements), so over :class:`difflib.SequenceMatcher`:
each string is reduced by thefuzz's ``full_process`` (characters U+0080-U+00FF deleted, so ``crème``
reads ``crme``; every other non-word character a space; lowercased), and the ratio is
``round(100 * SequenceMatcher(None, a, b).ratio())``. Written here so that the package needs no
fuzzy-matching dependency.

Where this module departs from ``get_reward`` on purpose: goal options are compared as values for
every goal (``get_reward`` passes a synthetic goal's options as ``(name, value)`` pairs, which its
colour normalisation and thefuzz read as the text ``"name value"``; ``docs/envs/webshop.md`` lists
what that changes). Each of the others is only reachable off WebShop's data: an attribute is
lowercased before the verbatim search (the original lowercases only the text, so an attribute with
a capital letter never matches there); an empty search query matches no query (the original counts
two products without a query as the same type); empty levels of a category path (``"A ›  › B"``)
are not category levels; a budget ``<= 0`` means "no price limit" and counts as met (the original
adds ``None`` to a number and raises); strings are cut to :data:`MAX_FUZZY_CHARS` before fuzzy
matching.

Example:
    >>> token_set_ratio("Machine Wash", "wash machine"), token_set_ratio("long sleeve", "short sleeve")
    (100, 71)
    >>> token_set_ratio("crème", "creme")  # thefuzz deletes the è: "crme" vs "creme"
    89
    >>> normalize_color("dark navy blue"), normalize_color("m")
    ('blue', 'm')
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COLOR_SET",
    "FUZZY_THRESHOLD",
    "Product",
    "Goal",
    "fuzzy_ratio",
    "token_set_ratio",
    "normalize_color",
    "title_words",
    "type_reward",
    "attribute_matches",
    "option_matches",
    "purchase_score",
]

#: a fuzzy match needs a token set ratio above this (WebShop: > 85)
FUZZY_THRESHOLD = 85

#: WebShop's colour vocabulary (``normalize.py``), in its order: an option is reduced to the first
#: of these it contains
COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy "
    "camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral "
    "cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass "
    "gray green grey heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon "
    "mauve merlot midnight mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter "
    "pink plum purple rainbow red rose royal rust sand sapphire seashell silver skull slate steel stone "
    "stonewash sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow"
).split()

_STOPWORDS = frozenset(
    "a an and are as at be but by for from if in into is it its no not of on or s such that the their then "
    "there these they this to was will with w x".split()
)
#: a word of a title: letters and digits, any script (spaCy's tokens keep "crème" whole)
_TITLE_WORD = re.compile(r"[^\W_]+")
#: thefuzz's "non letters and non numbers": any Unicode non-word character (``_`` is a word character)
_NON_WORD = re.compile(r"(?ui)\W")
#: thefuzz's ``asciidammit``: the characters U+0080-U+00FF are deleted (not transliterated); others stay
_LATIN1_DROP = dict.fromkeys(range(128, 256))
#: strings longer than this are cut before fuzzy matching (the matcher is quadratic; WebShop's
#: attributes and option values are far shorter)
MAX_FUZZY_CHARS = 200


@dataclass(frozen=True)
class Product:
    """One shop item, in WebShop's fields.

    Attributes:
        asin: the id shown on result pages and clicked (``click[b0...]``, case-insensitive).
        title: the product name.
        price: the price charged on purchase (WebShop draws one price in a listed range per product).
        price_text: how the price is shown (``"$12.99"`` or ``"$10.71 to $18.34"``).
        options: option name -> values (lowercase), e.g. ``{"color": ("red", "blue"), "size": ("s", "m")}``.
        attributes: the product's attribute phrases (``"machine wash"``, ``"cotton"``).
        category, query, product_category: WebShop's coarse category, the search query the product
            was scraped with, and its ``"A › B › C"`` category path (used by the type reward).
        description, bullets: the Description page and the Features page.
    """

    asin: str
    title: str
    price: float
    price_text: str = ""
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    attributes: tuple[str, ...] = ()
    category: str = ""
    query: str = ""
    product_category: str = ""
    description: str = ""
    bullets: tuple[str, ...] = ()

    def search_text(self) -> str:
        """What the search engine indexes (WebShop: title, description, first bullet, options)."""
        opts = ", and ".join(f"{k}: {', '.join(v)}" for k, v in self.options.items())
        return " ".join([self.title, self.description, self.bullets[0] if self.bullets else "", opts]).lower()


@dataclass(frozen=True)
class Goal:
    """A shopping instruction and what it asks for.

    Attributes:
        asin: the product the instruction was written for.
        instruction: the text shown to the agent.
        attributes: attribute phrases the product must have.
        options: option values to choose (e.g. ``("red", "m")``); ``option_names`` their names
            (``("color", "size")``) when known, else empty.
        price_upper: the budget (``price lower than ... dollars``); ``<= 0`` means no price term.
        name, query, product_category: of the goal product (for the type reward).
    """

    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float
    name: str = ""
    query: str = ""
    product_category: str = ""
    option_names: tuple[str, ...] = ()


def _process(text: str) -> str:
    # thefuzz 0.19 full_process(force_ascii=True): drop U+0080-U+00FF, non-word characters to spaces,
    # lowercase, strip
    text = str(text)[:MAX_FUZZY_CHARS].translate(_LATIN1_DROP)
    return _NON_WORD.sub(" ", text).lower().strip()


def fuzzy_ratio(a: str, b: str) -> int:
    """thefuzz's ``fuzz.ratio`` without processing: ``round(100 * SequenceMatcher(None, a, b).ratio())``,
    100 for equal strings, 0 when one is empty.

    Example:
        >>> fuzzy_ratio("large x", "large xx"), fuzzy_ratio("", "")
        (93, 100)
    """
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))


@functools.lru_cache(maxsize=1 << 16)
def token_set_ratio(a: str, b: str) -> int:
    """thefuzz 0.19's ``fuzz.token_set_ratio`` (0-100) of two strings: the best :func:`fuzzy_ratio`
    among the sorted shared tokens and each side's sorted tokens (shared ones first); 100 when one's
    token set contains the other's.

    Example:
        >>> token_set_ratio("small", "x-small"), token_set_ratio("", "red"), token_set_ratio("crème", "crème")
        (100, 0, 100)
    """
    pa, pb = _process(a), _process(b)
    if not pa or not pb:
        return 0
    ta, tb = set(pa.split()), set(pb.split())
    sect = " ".join(sorted(ta & tb))
    with_a = (sect + " " + " ".join(sorted(ta - tb))).strip()
    with_b = (sect + " " + " ".join(sorted(tb - ta))).strip()
    return max(fuzzy_ratio(sect, with_a), fuzzy_ratio(sect, with_b), fuzzy_ratio(with_a, with_b))


def normalize_color(text: str) -> str:
    """The first WebShop colour word ``text`` contains (as a substring), else ``text`` unchanged."""
    text = str(text)
    for color in COLOR_SET:
        if color in text:
            return color
    return text


def title_words(title: str) -> set[str]:
    """The content words of a title: the stand-in for spaCy's nouns in the type reward.

    Example:
        >>> sorted(title_words("Nordley Cotton T-Shirt for Men")), sorted(title_words("Crème Brûlée"))
        (['cotton', 'men', 'nordley', 'shirt'], ['brûlée', 'crème'])
    """
    return {w for w in _TITLE_WORD.findall(str(title).lower()) if len(w) > 1 and w not in _STOPWORDS}


def type_reward(product: Product, goal: Goal) -> dict[str, Any]:
    """WebShop's product-type term ``r_type`` and what it was computed from."""
    query_match = bool(goal.query) and product.query == goal.query
    cats_p = {c.strip() for c in product.product_category.split("›")} - {""}
    cats_g = {c.strip() for c in goal.product_category.split("›")} - {""}
    category_match = len(cats_p & cats_g) >= 2
    desired = title_words(goal.name)
    title_score = 0.2 if not desired else len(title_words(product.title) & desired) / len(desired)
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def attribute_matches(product: Product, attributes: Iterable[str]) -> int:
    """How many goal ``attributes`` the product has (fuzzy attribute match, else verbatim in its
    lowercased title, features or description, each searched on its own).

    Example:
        >>> p = Product("B0TEST0001", "Crème Brûlée Candle", 9.0, attributes=("soy wax",), bullets=("Hand poured",))
        >>> attribute_matches(p, ["soy", "crème brûlée", "Hand Poured", "candle hand"])
        3
    """
    texts = (product.title.lower(), " ".join(product.bullets).lower(), product.description.lower())
    count = 0
    for wanted in attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product.attributes):
            count += 1
        elif any(str(wanted).lower() in text for text in texts):
            count += 1
    return count


def option_matches(chosen: Iterable[str], wanted: Iterable[str]) -> int:
    """How many ``wanted`` option values a ``chosen`` value fuzzy-matches (colours normalised first).

    Example:
        >>> option_matches(["navy blue", "m"], ["blue", "m", "l"])
        2
    """
    chosen = [normalize_color(c) for c in chosen]
    count = 0
    for w in (normalize_color(w) for w in wanted):
        if any(token_set_ratio(c, w) > FUZZY_THRESHOLD for c in chosen):
            count += 1
    return count


def purchase_score(product: Product, goal: Goal, chosen_options: Sequence[str]) -> tuple[float, dict[str, Any]]:
    """WebShop's score in [0, 1] of buying ``product`` with ``chosen_options`` for ``goal``, and its parts.

    Example:
        >>> p = Product("B0TEST0001", "Nordley Cotton T-Shirt", 12.0, options={"size": ("s", "m")},
        ...             attributes=("cotton", "machine wash"), query="t-shirts")
        >>> g = Goal("B0TEST0001", "i need a cotton t-shirt in size m", ("cotton", "machine wash"), ("m",), 20.0,
        ...          name="Nordley Cotton T-Shirt", query="t-shirts")
        >>> purchase_score(p, g, ["m"])[0], purchase_score(p, g, ["s"])[0]
        (1.0, 0.75)
    """
    info = type_reward(product, goal)
    r_price = goal.price_upper <= 0 or product.price <= goal.price_upper
    n_attr = attribute_matches(product, goal.attributes)
    n_opt = option_matches(chosen_options, goal.options)
    total = (n_attr + n_opt + int(r_price)) / (len(goal.attributes) + len(goal.options) + 1)
    score = total * info["r_type"]
    info.update({"r_price": bool(r_price), "attribute_matches": n_attr, "option_matches": n_opt})
    return score, info

"""The WebShop purchase score against a faithful port of WebShop's own ``get_reward``.

The port below follows ``web_agent_site/engine/goal.py`` (``get_reward``, ``get_type_reward``,
``get_attribute_reward``, ``get_option_reward``) and the fuzzy matcher WebShop pins, ``thefuzz==0.19.0``
without ``python-Levenshtein`` (``fuzz.token_set_ratio`` over ``difflib.SequenceMatcher``, strings
processed by ``utils.full_process(force_ascii=True)``). Only spaCy's noun tagging is replaced (by the
package's ``title_words``, a documented difference), so the comparison checks everything else.
When thefuzz 0.19.0 itself is importable the port is also checked against it.
"""

from __future__ import annotations

import difflib
import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_torchrl.envs.games.webshop_data import load_products
from ragen_torchrl.envs.games.webshop_reward import (
    COLOR_SET,
    Goal,
    Product,
    attribute_matches,
    option_matches,
    purchase_score,
    title_words,
    token_set_ratio,
    type_reward,
)


# --------------------------------------------------------------------------- the port (thefuzz 0.19.0)
def port_full_process(s) -> str:
    # utils.asciidammit: a non-string is str()-ed (a (name, value) tuple reads "('color', 'red')"),
    # str.translate deleting chr(128)..chr(255); StringProcessor: (?ui)\W -> " ", str.lower, str.strip
    s = str(s).translate({c: None for c in range(128, 256)})
    return re.sub(r"(?ui)\W", " ", s).lower().strip()


def port_ratio(s1: str, s2: str) -> int:
    # @check_for_none @check_for_equivalence @check_empty_string; utils.intr(100 * m.ratio())
    if s1 == s2:
        return 100
    if len(s1) == 0 or len(s2) == 0:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, s1, s2).ratio()))


def port_token_set_ratio(s1: str, s2: str) -> int:
    p1, p2 = port_full_process(s1), port_full_process(s2)
    if not len(p1) > 0 or not len(p2) > 0:
        return 0
    tokens1, tokens2 = set(p1.split()), set(p2.split())
    sorted_sect = " ".join(sorted(tokens1.intersection(tokens2)))
    sorted_1to2 = " ".join(sorted(tokens1.difference(tokens2)))
    sorted_2to1 = " ".join(sorted(tokens2.difference(tokens1)))
    combined_1to2 = (sorted_sect + " " + sorted_1to2).strip()
    combined_2to1 = (sorted_sect + " " + sorted_2to1).strip()
    sorted_sect = sorted_sect.strip()
    return max(
        port_ratio(sorted_sect, combined_1to2),
        port_ratio(sorted_sect, combined_2to1),
        port_ratio(combined_1to2, combined_2to1),
    )


# --------------------------------------------------------------------------- the port (goal.py)
def port_normalize_color(color_string: str) -> str:
    for norm_color in COLOR_SET:
        if norm_color in color_string:
            return norm_color
    return color_string


def port_get_type_reward(purchased_product: dict, goal: dict, nouns=title_words) -> float:
    query_match = purchased_product["query"] == goal["query"]
    purchased_product_category = [x.strip() for x in purchased_product["product_category"].split("›")]
    goal_product_category = [x.strip() for x in goal["product_category"].split("›")]
    category_match = len(set(purchased_product_category) & set(goal_product_category)) >= 2
    purchased_type_parse, desired_type_parse = nouns(purchased_product["name"]), nouns(goal["name"])
    n_intersect_type = len(set(purchased_type_parse) & set(desired_type_parse))
    title_score = 0.2 if len(desired_type_parse) == 0 else n_intersect_type / len(desired_type_parse)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def port_get_attribute_reward(purchased_product: dict, goal: dict) -> int:
    num_attr_matches = 0
    for g_attr in goal["attributes"]:
        matched = False
        for p_attr in purchased_product["Attributes"]:
            if port_token_set_ratio(p_attr, g_attr) > 85:
                num_attr_matches += 1
                matched = True
                break
        if not matched and (
            g_attr in purchased_product["Title"].lower()
            or g_attr in " ".join(purchased_product["BulletPoints"]).lower()
            or g_attr in purchased_product["Description"].lower()
        ):
            num_attr_matches += 1
    return num_attr_matches


def port_get_option_reward(purchased_options: list, goal_options: list) -> int:
    purchased_options = [port_normalize_color(o) for o in purchased_options]
    goal_options = [port_normalize_color(o) for o in goal_options]
    num_option_matches = 0
    for g_option in goal_options:
        for p_option in purchased_options:
            if port_token_set_ratio(p_option, g_option) > 85:
                num_option_matches += 1
                break
    return num_option_matches


def port_get_reward(purchased_product: dict, goal: dict, price: float, options: dict) -> float:
    r_type = port_get_type_reward(purchased_product, goal)
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    num_attr_matches = port_get_attribute_reward(purchased_product, goal)
    goal_options = goal["goal_options"]
    # a synthetic goal's options are a dict: get_reward passes its (name, value) items
    goal_options = goal_options.items() if isinstance(goal_options, dict) else goal_options
    num_option_matches = port_get_option_reward(list(options.values()), goal_options)
    total_reward = (num_attr_matches + num_option_matches + r_price) / (
        len(goal["attributes"]) + len(goal["goal_options"]) + 1
    )
    return total_reward * r_type


def records(product: Product, goal: Goal) -> tuple[dict, dict]:
    """WebShop's product and goal dicts for the package's records."""
    p = {
        "query": product.query,
        "product_category": product.product_category,
        "name": product.title,
        "Title": product.title,
        "Attributes": list(product.attributes),
        "BulletPoints": list(product.bullets),
        "Description": product.description,
    }
    g = {
        "query": goal.query,
        "product_category": goal.product_category,
        "name": goal.name,
        "attributes": list(goal.attributes),
        "price_upper": goal.price_upper,
        "goal_options": list(goal.options),
    }
    return p, g


# --------------------------------------------------------------------------- fuzzy matching
HAND_PAIRS = [
    # (a, b, thefuzz 0.19.0's token_set_ratio, checked against thefuzz 0.19.0 itself)
    ("crème", "creme", 89),  # è (U+00E8) is deleted: "crme" vs "creme"; before: 80 ("cr me")
    ("Crème Brûlée", "creme brulee", 86),
    ("naïve", "naive", 89),
    ("größe xl", "grosse xl", 80),  # ö and ß are both in U+0080-U+00FF: "gre xl"
    ("łódź", "lodz", 29),  # ł (U+0142) and ź stay, ó is deleted: "łdź" vs "lodz" share "d": 2/7
    ("红色 t恤", "红色", 100),  # CJK letters are word characters and stay
    ("x_large", "x large", 71),  # "_" is a word character for thefuzz: "x_large" vs "large x"
    ("rose 🌹 gold", "rose gold", 100),  # an emoji is a separator
    ("Machine Wash", "wash machine", 100),
    ("2 pack", "4 pack", 83),
    ("", "red", 0),
    ("é", "é", 0),  # both empty after processing
]


@pytest.mark.parametrize("a, b, expected", HAND_PAIRS)
def test_token_set_ratio_hand_written(a, b, expected):
    assert port_token_set_ratio(a, b) == expected
    assert token_set_ratio(a, b) == expected


def test_accented_attribute_matches_as_in_webshop():
    # the case: 89 > 85 is a match in WebShop; the package said 80 (no match) before
    assert token_set_ratio("crème", "creme") == 89
    product = Product("B0TEST0001", "Hand Cream", 9.0, attributes=("crème",), query="cream", product_category="A › B")
    goal = Goal("B0TEST0001", "i want creme", ("creme",), (), 10.0, name="Hand Cream", query="cream")
    assert purchase_score(product, goal, [])[0] == 1.0


_alphabet = st.sampled_from(
    list("abcxyz019 -_/,.'") + list("éèüößçñåÆ") + list("łőžİﬁ") + ["红", "色", "т", "ш", "🌹", "\u00a0", "\t"]
)
_fuzzy_text = st.lists(_alphabet, max_size=24).map("".join)


@settings(max_examples=400, deadline=None)
@given(_fuzzy_text, _fuzzy_text)
def test_token_set_ratio_matches_the_port(a, b):
    assert token_set_ratio(a, b) == port_token_set_ratio(a, b)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["red", "crème", "x_l", "größe", "2 pack", "navy blue", "红色"]), _fuzzy_text)
def test_token_set_ratio_matches_the_port_near_words(word, noise):
    for a, b in ((word, word + noise), (noise + " " + word, word), (word.upper(), word + " " + noise)):
        assert token_set_ratio(a, b) == port_token_set_ratio(a, b)


def test_port_agrees_with_thefuzz_0_19_when_installed():
    fuzz = pytest.importorskip("thefuzz.fuzz")
    import thefuzz

    if thefuzz.__version__ != "0.19.0":
        pytest.skip(f"WebShop pins thefuzz 0.19.0; {thefuzz.__version__} scores differently")
    try:
        import Levenshtein  # noqa: F401

        pytest.skip("python-Levenshtein installed: thefuzz 0.19 then uses it instead of difflib")
    except ImportError:
        pass
    rng = random.Random(0)
    chars = "abcxyz019 -_/,éèüößñłőİ红色🌹"
    pairs = [(a, b) for a, b, _ in HAND_PAIRS]
    pairs += [
        ("".join(rng.choices(chars, k=rng.randint(0, 20))), "".join(rng.choices(chars, k=20))) for _ in range(500)
    ]
    for a, b in pairs:
        assert fuzz.token_set_ratio(a, b) == port_token_set_ratio(a, b) == token_set_ratio(a, b), (a, b)


# --------------------------------------------------------------------------- the whole score
WORDS = "cotton machine wash long sleeve soy wax crème brûlée café red blue navy xl small pack 2 men women 红色".split()
SIZES = ["small", "x-large", "xl", "2 pack", "one size", "größe m"]
CATS = ["Clothing", "clothing", "Men", "Shirts", "Beauty", "Crème", "Home"]


def _random_case(rng: random.Random) -> tuple[Product, Goal, list[str]]:
    def phrase(k: int) -> str:
        return " ".join(rng.choices(WORDS, k=k))

    def path() -> str:
        return " › ".join(rng.sample(CATS, rng.randint(1, 4)))

    attrs = tuple(phrase(rng.randint(1, 2)) for _ in range(rng.randint(1, 3)))
    options = {"color": tuple(rng.sample(COLOR_SET, 3)) + ("dark navy blue",), "size": tuple(rng.sample(SIZES, 3))}
    title = " ".join([phrase(3), rng.choice(["", "  ", "\t"]), phrase(2)])
    product = Product(
        "B0TEST0001",
        title,
        float(rng.randint(5, 50)),
        options=options,
        attributes=attrs if rng.random() < 0.8 else (),
        query=rng.choice(["shirts", "candles", "mugs"]),
        product_category=path(),
        description=phrase(rng.randint(0, 8)),
        bullets=tuple(phrase(rng.randint(1, 4)) for _ in range(rng.randint(0, 3))),
    )
    goal_attrs = tuple(phrase(rng.randint(1, 2)) for _ in range(rng.randint(1, 3)))
    wanted = tuple(rng.choice(v) for v in options.values()) if rng.random() < 0.5 else (rng.choice(COLOR_SET), "xl")
    goal = Goal(
        "B0TEST0001",
        "instruction",
        goal_attrs,
        wanted[: rng.randint(0, 2)],
        float(rng.choice([10, 30, 60])),
        name=phrase(rng.randint(1, 4)),
        query=rng.choice(["shirts", "candles", "mugs"]),
        product_category=path(),
    )
    chosen = [rng.choice(v) for v in options.values()][: rng.randint(0, 2)]
    return product, goal, chosen


def test_purchase_score_matches_the_port_on_generated_cases():
    rng = random.Random(1234)
    for _ in range(400):
        product, goal, chosen = _random_case(rng)
        p, g = records(product, goal)
        options = dict(zip(("color", "size"), chosen))
        expected = port_get_reward(p, g, product.price, options)
        assert purchase_score(product, goal, list(options.values()))[0] == expected, (product, goal, chosen)


def test_category_paths_are_compared_case_sensitively():
    # WebShop strips the levels and compares them as written: "Clothing" is not "clothing"
    product = Product("B0TEST0001", "Shirt", 9.0, product_category="Clothing › Men › Shirts")
    goal = Goal("B0TEST0001", "x", (), (), 10.0, name="Shirt", product_category="clothing › men › Shirts")
    p, g = records(product, goal)
    assert port_get_type_reward(p, g) == 1.0  # the title still matches (title score 1)
    assert type_reward(product, goal)["category_match"] is False
    goal = Goal("B0TEST0001", "x", (), (), 10.0, name="Shirt", product_category="Clothing ›Men")
    assert type_reward(product, goal)["category_match"] is True


def test_features_are_searched_on_their_own():
    # WebShop searches the title, the joined bullets and the description separately: an attribute
    # never spans two of them
    product = Product("B0TEST0001", "Soy", 9.0, bullets=("wax candle",), description="")
    goal = Goal("B0TEST0001", "x", ("soy wax", "wax candle"), (), 10.0, name="Soy")
    p, g = records(product, goal)
    assert port_get_attribute_reward(p, g) == 1
    assert purchase_score(product, goal, [])[1]["attribute_matches"] == 1


# --------------------------------------------------------------------------- documented departures
def test_documented_departures_from_get_reward():
    base = Product("B0TEST0001", "Cotton Shirt", 9.0, description="machine wash", query="shirts", product_category="A")
    goal = Goal("B0TEST0001", "x", ("Machine Wash",), (), 10.0, name="Cotton Shirt", query="shirts")
    p, g = records(base, goal)
    # an attribute with capitals: WebShop never finds it in the lowercased text; here it is found
    assert port_get_attribute_reward(p, g) == 0
    assert purchase_score(base, goal, [])[1]["attribute_matches"] == 1
    # empty queries: WebShop counts them as the same query; here they match nothing
    product = Product("B0TEST0001", "Shirt", 9.0)
    goal = Goal("B0TEST0001", "x", (), (), 10.0, name="Shirt")
    assert records(product, goal)[0]["query"] == records(product, goal)[1]["query"] == ""
    assert type_reward(product, goal)["query_match"] is False
    # an empty category level is not a level (WebShop: "A ›  › B" and "A › › C" share "A" and "")
    product = Product("B0TEST0001", "Shirt", 9.0, product_category="A ›  › B")
    goal = Goal("B0TEST0001", "x", (), (), 10.0, name="Shirt", product_category="A › › C")
    assert type_reward(product, goal)["category_match"] is False
    # no budget: WebShop adds None to a number and raises; here the price term counts as met
    goal = Goal("B0TEST0001", "x", ("cotton",), (), 0.0, name="Cotton Shirt", query="shirts")
    with pytest.raises(TypeError):
        port_get_reward(*records(base, goal), base.price, {})
    assert purchase_score(base, goal, [])[0] == 1.0


def test_synthetic_goal_options_are_compared_as_values_not_pairs():
    # WebShop keeps a synthetic goal's options as a dict and get_reward passes its (name, value) items:
    # normalize_color tests tuple membership (a colour only when the name or value *is* one) and thefuzz
    # reads str(pair), "('size', 'standard')" -> "size standard". Here values are compared with values.
    # "standard" reads "tan" (its first colour substring): 2 * 3 / (3 + 13) = 0.375 -> 38 against the pair
    assert port_token_set_ratio("tan", ("size", "standard")) == 38
    assert port_get_option_reward(["standard"], [("size", "standard")]) == 0
    assert option_matches(["standard"], ["standard"]) == 1
    # "x-large" against the pair: "large" vs "large x" is 2 * 5 / 12 -> 83; against the value "large" 100
    assert port_token_set_ratio("x-large", ("size", "large")) == 83
    assert port_get_option_reward(["x-large"], [("size", "large")]) == 0
    assert option_matches(["x-large"], ["large"]) == 1
    # the pair is never reduced to "blue": "navy" is one of its words (100); the value reads "blue" (0)
    assert port_get_option_reward(["navy"], [("color", "dark navy blue")]) == 1
    assert option_matches(["navy"], ["dark navy blue"]) == 0
    # the whole score: attribute, price, and the asked "standard" chosen: WebShop (1 + 0 + 1) / 3, here 1
    product = Product("B0TEST0001", "Cotton Shirt", 9.0, options={"size": ("standard",)}, attributes=("cotton",))
    goal = Goal("B0TEST0001", "x", ("cotton",), ("standard",), 10.0, name="Cotton Shirt", option_names=("size",))
    p, g = records(product, goal)
    g["goal_options"] = {"size": "standard"}
    assert port_get_reward(p, g, product.price, {"size": "standard"}) == pytest.approx(2 / 3)
    assert purchase_score(product, goal, ["standard"])[0] == 1.0


def test_pair_reading_agrees_with_thefuzz_0_19_when_installed():
    fuzz = pytest.importorskip("thefuzz.fuzz")
    import thefuzz

    if thefuzz.__version__ != "0.19.0":
        pytest.skip(f"WebShop pins thefuzz 0.19.0; {thefuzz.__version__} scores differently")
    for chosen, pair in (("tan", ("size", "standard")), ("x-large", ("size", "large")), ("navy", ("color", "navy"))):
        assert fuzz.token_set_ratio(chosen, pair) == port_token_set_ratio(chosen, pair), (chosen, pair)


def test_loader_collapses_title_whitespace(tmp_path):
    # WebShop keeps a title as scraped; the loader collapses runs of whitespace, so an attribute is found
    # across a double space in the title, where WebShop's verbatim search misses it
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{"asin": "B0TEST0001", "name": "Soy  Wax Candle", "pricing": "$9.00"}]))
    product = load_products(path)[0]
    assert product.title == "Soy Wax Candle"
    goal = Goal("B0TEST0001", "x", ("soy wax",), (), 10.0, name="Soy Wax Candle")
    p, g = records(product, goal)
    p["Title"] = p["name"] = "Soy  Wax Candle"
    assert port_get_attribute_reward(p, g) == 0
    assert attribute_matches(product, goal.attributes) == 1

"""WebShop game core: action parsing, pages and their rules, the purchase score (hand-worked cases),
the generated catalogue, the BM25 search and the oracle."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from ragen_torchrl.envs.games.webshop import PAGE_SIZE, Shop, WebShopGame, parse_action
from ragen_torchrl.envs.games.webshop_catalog import (
    OPTION_VALUES,
    PRODUCT_TYPES,
    budget_for,
    generate_catalog,
    generate_goals,
)
from ragen_torchrl.envs.games.webshop_reward import (
    Goal,
    Product,
    normalize_color,
    option_matches,
    purchase_score,
    title_words,
    token_set_ratio,
    type_reward,
)
from ragen_torchrl.envs.games.webshop_search import BM25Index, tokenize


# --------------------------------------------------------------------------- hand-built shop
def mug(i: int, color_options=("red", "blue"), price=9.99, attributes=("ceramic", "dishwasher safe")) -> Product:
    return Product(
        asin=f"B0MUG{i:05d}",
        title=f"Brand{i} Ceramic Coffee Mug",
        price=price,
        price_text=f"${price:.2f}",
        options={"color": tuple(color_options), "pack": ("single", "2 pack")},
        attributes=tuple(attributes),
        query="coffee mugs",
        product_category="Home › Kitchen › Mugs",
        description=f"Mug number {i}.",
        bullets=("Holds 12 oz",),
    )


MUGS = [mug(i) for i in range(12)]
SHOP = Shop(MUGS)
GOAL = Goal(
    asin=MUGS[3].asin,
    instruction="i need ceramic dishwasher safe coffee mug with color: blue, and pack: 2 pack, and price lower than 20.00 dollars",
    attributes=("ceramic", "dishwasher safe"),
    options=("blue", "2 pack"),
    price_upper=20.0,
    name=MUGS[3].title,
    query="coffee mugs",
    product_category="Home › Kitchen › Mugs",
)


def new_game(**kw) -> WebShopGame:
    return WebShopGame(GOAL, SHOP, **kw)


# --------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    "text, expected",
    [
        ("search[red mug]", ("search", "red mug")),
        ("  CLICK[ Buy   Now ] ", ("click", "buy now")),
        ("click[< prev]", ("click", "< prev")),
        ("click[a[b]]", ("click", "a[b]")),
        ("click[]", None),
        ("search", None),
        ("[red]", None),
        ("jump[red]", None),
        ("click[red] now", None),
        (None, None),
    ],
)
def test_parse_action(text, expected):
    assert parse_action(text) == expected


def test_unknown_observation_or_reward_mode_is_refused():
    with pytest.raises(ValueError, match="observation"):
        WebShopGame(GOAL, SHOP, observation="html")
    with pytest.raises(ValueError, match="reward_mode"):
        WebShopGame(GOAL, SHOP, reward_mode="dense")


# --------------------------------------------------------------------------- pages
def test_search_page_offers_only_search():
    game = new_game()
    assert game.page == "search" and game.available_actions() == ["search[<query>]"]
    assert game.render_text() == f"Instruction: {GOAL.instruction}\nSearch page: search[<keywords>]"
    for bad in ("click[buy now]", "click[back to search]", "buy", "search[]"):
        before = game.render_text()
        reward, done, info = game.step(bad)
        assert (reward, done, info["action_is_valid"], info["action_is_effective"]) == (0.0, False, False, False)
        assert game.render_text() == before


def test_results_are_paged_ten_at_a_time_with_next_and_prev():
    game = new_game()
    game.step("search[ceramic coffee mug]")
    assert game.page == "results" and len(game.results) == 12 and game.page_no == 1
    text = game.render_text()
    assert text.startswith("Results page 1/2 (12 results). [back to search] [next >]\n[b0mug")
    assert "< prev" not in text and len(text.splitlines()) == 1 + PAGE_SIZE
    webshop = WebShopGame(GOAL, SHOP, observation="webshop")
    webshop.step("search[ceramic coffee mug]")
    text = webshop.render_text()
    assert text.startswith(
        f"Instruction: [SEP] {GOAL.instruction} [SEP] Back to Search [SEP] Page 1 (Total results: 12)"
    )
    assert "Next >" in text and "Available actions: click[back to search], click[next >], click[b0mug" in text
    first_page = [p.asin.lower() for p in game.results[:PAGE_SIZE]]
    assert game.clickables() == ["back to search", "next >", *first_page]
    assert game.step("search[mug]")[2]["action_is_valid"] is False  # no search box on the results page
    assert game.step("click[next >]")[2]["action_is_effective"]
    assert game.page_no == 2 and game.clickables() == ["back to search", "< prev"] + [
        p.asin.lower() for p in game.results[PAGE_SIZE:]
    ]
    assert game.step("click[next >]")[2]["action_is_valid"] is False  # last page
    game.step("click[< prev]")
    assert game.page_no == 1


def test_item_page_options_sub_pages_and_back():
    game = new_game()
    game.step("search[ceramic coffee mug]")
    asin = game.results[0].asin
    game.step(f"click[{asin}]")  # asins are case-insensitive
    assert game.page == "item" and game.product.asin == asin
    assert game.clickables() == ["back to search", "< prev", "description", "features", "buy now"] + [
        "red",
        "blue",
        "single",
        "2 pack",
    ]
    assert game.render_text().splitlines() == [
        f"{game.product.title} $9.99. [back to search] [< prev] [description] [features] [buy now]",
        "color: [red] [blue]",
        "pack: [single] [2 pack]",
    ]
    _, _, info = game.step("click[Blue]")
    assert info["action_is_effective"] and game.chosen == {"color": "blue"}
    assert game.render_text().startswith("You have clicked blue.") and "Selected: color: blue" in game.render_text()
    assert game.step("click[blue]")[2]["action_is_effective"] is False  # already chosen: valid, no change
    assert game.step("click[green]")[2]["action_is_valid"] is False  # not an option of this product
    game.step("click[description]")
    assert game.page == "description" and "Mug number" in game.render_text()
    assert game.clickables() == ["back to search", "< prev"]
    game.step("click[< prev]")
    assert game.page == "item" and game.chosen == {"color": "blue"}
    game.step("click[features]")
    assert "Holds 12 oz" in game.render_text()
    game.step("click[< prev]")
    game.step("click[< prev]")
    assert game.page == "results" and game.page_no == 1
    game.step(f"click[{game.results[1].asin}]")
    assert game.chosen == {}  # opening a product clears the options chosen on another
    game.step("click[back to search]")
    assert game.page == "search" and game.results == () and game.product is None


def test_buying_ends_the_episode_with_binary_reward_and_the_score_in_info():
    game = new_game()
    game.step("search[ceramic coffee mug]")
    game.step(f"click[{MUGS[5].asin}]" if MUGS[5] in game.results[:PAGE_SIZE] else f"click[{game.results[0].asin}]")
    game.step("click[blue]")
    reward, done, info = game.step("click[buy now]")
    # all mugs are alike: 2 attributes + 1 of 2 options + price = 4 of 5
    assert (reward, done, info["score"], info["success"]) == (0.0, True, pytest.approx(0.8), False)
    assert game.render_text().endswith("Your score (min 0.0, max 1.0): 0.80")
    assert game.step("click[buy now]") == (
        0.0,
        True,
        {"success": False, "action_is_effective": False, "action_is_valid": False, "score": pytest.approx(0.8)},
    )
    score_game = new_game(reward_mode="score")
    for action in ("search[mug]", f"click[{score_game.shop.search('mug')[0].asin}]", "click[buy now]"):
        reward, done, info = score_game.step(action)
    assert done and reward == pytest.approx(info["score"]) == pytest.approx(0.6)  # attributes + price


def test_oracle_buys_with_the_right_options_and_reaches_score_one():
    game = new_game()
    actions = []
    while not game.done:
        action = game.oracle_action()
        assert game.is_available(action), action
        assert game.explain(action)
        actions.append(action)
        game.step(action)
    assert actions[0] == "search[ceramic dishwasher safe coffee mug]"
    assert actions[-3:] == ["click[blue]", "click[2 pack]", "click[buy now]"]
    assert game.success and game.score == 1.0 and game.progress() == 0.0


def test_oracle_goes_to_the_page_and_item_that_match():
    shop = Shop([mug(i, color_options=("red",)) for i in range(11)] + [mug(11, color_options=("red", "blue"))])
    game = WebShopGame(GOAL, shop)
    game.step("search[ceramic coffee mug]")
    target = next(i for i, p in enumerate(game.results) if "blue" in p.options["color"])
    if target >= PAGE_SIZE:
        assert game.oracle_action() == "click[next >]"
    game.step(f"click[{game.results[0 if target else 1].asin}]")  # a mug without blue
    assert game.oracle_action() == "click[< prev]"
    game.step("click[description]")
    assert game.oracle_action() == "click[< prev]"
    while not game.done:
        game.step(game.oracle_action())
    assert game.success


def test_oracle_recovers_from_an_empty_search():
    game = new_game()
    game.step("search[zebra]")
    assert game.results == () and "No results." in game.render_text()
    assert game.oracle_action() == "click[back to search]"
    game.step("click[back to search]")
    assert game.oracle_action() == "search[ceramic dishwasher safe coffee mug]"
    # when the instruction's own query finds nothing, the oracle searches the goal product's title
    odd = WebShopGame(dataclasses.replace(GOAL, instruction="i need a zebra with color: blue"), SHOP)
    for expected in ("search[zebra]", "click[back to search]", f"search[{GOAL.name.lower()}]"):
        assert odd.oracle_action() == expected
        odd.step(expected)
    while not odd.done:
        odd.step(odd.oracle_action())
    assert odd.score == 1.0


# --------------------------------------------------------------------------- reward (hand-worked)
def test_token_set_ratio_and_colour_normalisation():
    assert token_set_ratio("small", "x-small") == 100  # a subset of tokens: WebShop counts it a match
    assert token_set_ratio("xl", "xxl") == 80 and token_set_ratio("Machine Wash", "wash, machine") == 100
    assert token_set_ratio("2 pack", "4 pack") == 83 and token_set_ratio("", "x") == 0
    assert normalize_color("navy blue") == "blue" and normalize_color("dark chocolate") == "chocolate"
    assert option_matches(["navy blue", "xl"], ["blue", "xxl"]) == 1
    assert title_words("The Nordley T-Shirt for Men") == {"nordley", "shirt", "men"}


def test_purchase_score_hand_worked_cases():
    p = Product(
        "B0T1",
        "Nordley Cotton T-Shirt",
        12.0,
        options={"size": ("s", "m")},
        attributes=("cotton", "machine wash"),
        query="t-shirts",
        product_category="A › B › C",
    )
    g = Goal("B0T1", "...", ("cotton", "machine wash"), ("m",), 20.0, name="Nordley Cotton T-Shirt", query="t-shirts")
    assert purchase_score(p, g, ["m"])[0] == 1.0  # (2 + 1 + 1) / 4
    assert purchase_score(p, g, ["s"])[0] == 0.75  # wrong size
    assert purchase_score(p, g, [])[0] == 0.75  # no option chosen
    cheap = dataclasses.replace(g, price_upper=10.0)
    score, info = purchase_score(p, cheap, ["m"])
    assert score == 0.75 and info["r_price"] is False  # over the budget
    no_wash = Product(
        "B0T2",
        "Nordley Cotton T-Shirt",
        12.0,
        options=p.options,
        attributes=("cotton",),
        description="Easy care: machine wash cold.",
        query="t-shirts",
    )
    assert purchase_score(no_wash, g, ["m"])[0] == 1.0  # the attribute is found in the description
    poly = Product(
        "B0T3", "Nordley Polyester T-Shirt", 12.0, options=p.options, attributes=("polyester",), query="t-shirts"
    )
    assert purchase_score(poly, g, ["m"])[0] == 0.5  # (0 + 1 + 1) / 4


def test_type_reward_levels():
    g = Goal("B0", "", (), (), 0.0, name="Aa Bb Cc Dd Ee Ff", query="q1", product_category="X › Y › Z")
    same_query = Product("B1", "Zz", 1.0, query="q1")
    assert type_reward(same_query, g)["r_type"] == 0.0  # no title word in common: 0 whatever matched
    assert type_reward(Product("B1", "Aa Qq", 1.0, query="q1"), g)["r_type"] == 1.0  # 1/6 but same query
    assert type_reward(Product("B1", "Aa Qq", 1.0, query="q2"), g)["r_type"] == 0.5  # 1/6, nothing else
    assert type_reward(Product("B1", "Aa Bb", 1.0, query="q2"), g)["r_type"] == 1.0  # 2/6 > 0.2
    two_levels = Product("B1", "Aa Qq", 1.0, query="q2", product_category="X › Y › W")
    assert type_reward(two_levels, g)["category_match"] and type_reward(two_levels, g)["r_type"] == 1.0
    long_goal = Goal("B0", "", (), (), 0.0, name=" ".join(f"w{i}" for i in range(11)), query="q1")
    assert type_reward(Product("B1", "w0 other", 1.0, query="q1"), long_goal)["r_type"] == 0.1  # 1/11 < 0.1
    p = Product("B1", "Aa Bb", 5.0)
    assert purchase_score(p, Goal("B0", "", (), (), 0.0, name="Zz"), [])[0] == 0.0  # type 0 zeroes the score


# --------------------------------------------------------------------------- catalogue and goals
def test_generated_catalogue_is_deterministic_and_well_formed():
    a, b = generate_catalog(500, seed=3), generate_catalog(500, seed=3)
    assert a == b and a != generate_catalog(500, seed=4)
    assert len({p.asin for p in a}) == 500
    for p in a:
        assert p.options and p.attributes and p.price > 0 and p.query and p.price_text == f"${p.price:.2f}"
        assert all(values for values in p.options.values())
    with pytest.raises(ValueError, match="num_products"):
        generate_catalog(0)


def test_option_values_of_a_list_never_match_each_other_and_attribute_groups_are_distinct():
    for kind, values in OPTION_VALUES.items():
        for x in values:
            for y in values:
                if x != y:
                    assert option_matches([x], [y]) == 0, (kind, x, y)
    for name, (_, _, groups, kinds, _) in PRODUCT_TYPES.items():
        flat = [a for g in groups for a in g]
        for x in flat:
            for y in flat:
                if x != y:
                    assert x not in y and token_set_ratio(x, y) <= 85, (name, x, y)
        assert set(kinds) <= set(OPTION_VALUES)


def test_generated_goals_follow_webshop_style():
    products = generate_catalog(300, seed=0)
    goals = generate_goals(products)
    assert goals == generate_goals(products) and len(goals) == len(products)
    for goal, product in zip(goals, products):
        assert goal.asin == product.asin and set(goal.attributes) <= set(product.attributes)
        assert goal.option_names == tuple(product.options)
        for name, value in zip(goal.option_names, goal.options):
            assert value in product.options[name] and f"{name}: {value}" in goal.instruction
        assert f"price lower than {goal.price_upper:.2f} dollars" in goal.instruction
        assert product.price < goal.price_upper <= product.price + 40
        assert purchase_score(product, goal, list(goal.options))[0] == 1.0


def test_budget_follows_webshop_price_steps():
    import random

    assert {budget_for(23.5, random.Random(i)) for i in range(50)} == {40.0, 50.0, 60.0}
    assert budget_for(985.0, random.Random(0)) == 1_000_000.0


# --------------------------------------------------------------------------- search
def test_bm25_search_ranks_matching_products_first_and_is_deterministic():
    shop = Shop(generate_catalog(600, seed=0))
    hits = shop.search("waterproof rain boots")
    assert hits and all("Rain Boots" in p.title for p in hits[:5]) and len(hits) <= 50
    assert shop.search("waterproof rain boots") == hits
    assert tokenize("Pillow-Covers for ME") == ["pillow", "cover"]
    assert shop.search("qqqq zzzz") == () and shop.search("") == ()
    assert BM25Index(["a b", "c d"]).search("ab cd", k=0) == []


def test_search_words_keep_non_ascii_letters():
    # Lucene (WebShop's search) keeps "crème" and "x_large" one word; "crème" used to be split into
    # "cr" + "me" (a stopword), so it found any text with the word "cr"
    assert tokenize("Crème Brûlée x_large __ _") == ["crème", "brûlée", "x_large"]
    index = BM25Index(["creme cr hand cream", "crème brûlée candle", "blue mug"])
    assert index.search("crème", k=5) == [1] and index.search("brûlée", k=5) == [1]
    assert index.search("creme", k=5) == [0]  # accents are not folded (as in Lucene's English analyzer)


def test_missing_bm25s_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(ImportError, match=r"pip install ragen_torchrl\[search\]"):
        BM25Index(["red mug"])


# --------------------------------------------------------------------------- oracle on the shipped goals
def test_oracle_reaches_score_one_on_shipped_goals_within_nine_actions():
    from ragen_torchrl.envs.webshop import load_shop

    shop, pools = load_shop()
    assert len(shop.products) == 3000
    for split, count in (("train", 150), ("val", 100)):
        for goal in pools[split][:count]:
            game = WebShopGame(goal, shop)
            for _ in range(9):
                game.step(game.oracle_action())
                if game.done:
                    break
            assert game.success and game.score == 1.0, goal.instruction

"""The shipped GENERATED WebShop catalogue and its goal instructions (no real products).

:func:`generate_catalog` makes ``num_products`` invented products (default 3000) deterministically
from a seed: 24 product types in six departments (clothing, shoes, home, beauty, grocery,
electronics; only products of one type share two category levels), each product with an invented brand, a price in its type's range, two to four
attributes drawn from its type's attribute groups (one value per group, e.g. ``long sleeve`` *or*
``short sleeve``), and option values (colour, size, scent, flavour, pack, length...) drawn from its
type's option lists. Titles, descriptions and feature bullets mention only the product's own
attributes. Option values of one list never fuzzy-match each other, so choosing the right value
matters for the score (see :mod:`~ragen_torchrl.envs.games.webshop_reward`).

:func:`generate_goals` writes one instruction per product, in the style of WebShop's synthetic
goals: ``"i am looking for a cotton long sleeve t-shirt with color: red, and size: m, and price
lower than 30.00 dollars"`` -- two attributes (one when the product has fewer), one value per option
of the product, and a budget drawn as WebShop does (the upper of two of the next four multiples of 10
above the price). Several products can satisfy one goal (another brand with the same attributes and
options under the budget): as in WebShop, any of them scores 1.

This is a synthetic stand-in for WebShop's scraped Amazon catalogue, sized for CPU runs and tests.
Real data: :mod:`~ragen_torchrl.envs.games.webshop_data`.

Example:
    >>> products = generate_catalog(50, seed=0)
    >>> len(products), products[0].asin == generate_catalog(50, seed=0)[0].asin
    (50, True)
    >>> goal = generate_goals(products)[0]
    >>> goal.asin == products[0].asin and "price lower than" in goal.instruction
    True
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from .webshop_reward import Goal, Product

__all__ = ["PRODUCT_TYPES", "OPTION_VALUES", "generate_catalog", "generate_goals", "budget_for", "PRICE_STEPS"]

#: WebShop's budget grid: 10, 20, ..., 990 dollars
PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))

#: option lists: no two values of one list fuzzy-match (tested), so only the asked value scores
OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "color": (
        "black",
        "white",
        "red",
        "blue",
        "green",
        "grey",
        "pink",
        "beige",
        "brown",
        "purple",
        "yellow",
        "olive",
        "khaki",
        "burgundy",
        "teal",
        "orange",
    ),
    "size": ("xs", "s", "m", "l", "xl", "xxl"),
    "shoe size": ("6", "7", "8", "9", "10", "11", "12", "13"),
    "bed size": ("twin", "full", "queen", "king"),
    "scent": ("lavender", "vanilla", "unscented", "coconut", "citrus", "eucalyptus"),
    "flavor": ("vanilla", "strawberry", "original", "sea salt", "cinnamon", "peanut butter", "mango"),
    "pack": ("single", "2 pack", "4 pack", "6 pack", "8 pack"),
    "volume": ("100 ml", "250 ml", "500 ml", "1 liter"),
    "weight": ("100 g", "250 g", "500 g", "1 kg"),
    "length": ("3 ft", "6 ft", "10 ft"),
    "model": ("iphone se", "iphone 15", "galaxy s23", "pixel 8"),
}

# type name -> (department path, query, attribute groups, option kinds, price range)
PRODUCT_TYPES: dict[str, tuple[str, str, tuple[tuple[str, ...], ...], tuple[str, ...], tuple[float, float]]] = {
    "t-shirt": (
        "clothing › tops › t-shirts",
        "men's t-shirts",
        (
            ("long sleeve", "short sleeve"),
            ("cotton", "polyester"),
            ("crew neck", "v-neck"),
            ("machine wash",),
            ("slim fit", "relaxed fit"),
        ),
        ("color", "size"),
        (8, 40),
    ),
    "hoodie": (
        "clothing › sweatshirts › hoodies",
        "men's hoodies",
        (
            ("pullover", "zip up"),
            ("fleece lined",),
            ("cotton blend", "polyester"),
            ("machine wash",),
            ("kangaroo pocket",),
        ),
        ("color", "size"),
        (20, 70),
    ),
    "jeans": (
        "clothing › denim › jeans",
        "women's jeans",
        (("high waist", "mid rise"), ("skinny", "straight leg", "bootcut"), ("stretch denim",), ("machine wash",)),
        ("color", "size"),
        (25, 80),
    ),
    "dress": (
        "clothing › dresses › casual dresses",
        "women's dresses",
        (
            ("maxi", "midi", "mini"),
            ("floral print", "solid color"),
            ("short sleeve", "sleeveless"),
            ("hand wash", "machine wash"),
        ),
        ("color", "size"),
        (20, 90),
    ),
    "leggings": (
        "clothing › activewear › leggings",
        "women's leggings",
        (("high waist",), ("tummy control",), ("moisture wicking",), ("squat proof",)),
        ("color", "size"),
        (12, 45),
    ),
    "running shoes": (
        "shoes › athletic › running",
        "men's running shoes",
        (("lightweight",), ("breathable mesh",), ("non slip",), ("memory foam",)),
        ("color", "shoe size"),
        (35, 130),
    ),
    "rain boots": (
        "shoes › boots › rain boots",
        "women's rain boots",
        (("waterproof",), ("rubber sole",), ("knee high", "ankle")),
        ("color", "shoe size"),
        (25, 90),
    ),
    "pillow cover": (
        "home › decorative pillows › covers",
        "throw pillow covers",
        (("linen", "velvet"), ("hidden zipper",), ("machine washable",), ("set of 2",)),
        ("color",),
        (9, 35),
    ),
    "comforter set": (
        "home › bedding › comforters",
        "comforter sets",
        (("down alternative",), ("all season",), ("microfiber",), ("hypoallergenic",)),
        ("color", "bed size"),
        (40, 160),
    ),
    "bath towel": (
        "home › bath › towels",
        "bath towels",
        (("cotton",), ("quick dry",), ("extra absorbent",), ("oversized",)),
        ("color", "pack"),
        (12, 60),
    ),
    "blackout curtains": (
        "home › window treatments › curtains",
        "blackout curtains",
        (("thermal insulated",), ("grommet top", "rod pocket"), ("noise reducing",)),
        ("color", "pack"),
        (18, 70),
    ),
    "coffee mug": (
        "home › kitchen › mugs",
        "coffee mugs",
        (("ceramic", "stainless steel"), ("dishwasher safe",), ("microwave safe",), ("with lid",)),
        ("color", "pack"),
        (8, 35),
    ),
    "shampoo": (
        "beauty › hair care › shampoo",
        "shampoo",
        (("sulfate free",), ("paraben free",), ("for dry hair", "for oily hair"), ("argan oil",)),
        ("scent", "volume"),
        (6, 30),
    ),
    "body lotion": (
        "beauty › body care › lotions",
        "body lotion",
        (("shea butter",), ("fragrance free", "long lasting scent"), ("for sensitive skin",), ("cruelty free",)),
        ("scent", "volume"),
        (5, 28),
    ),
    "face serum": (
        "beauty › face care › serums",
        "face serum",
        (("vitamin c", "hyaluronic acid", "retinol"), ("anti aging",), ("cruelty free",), ("vegan",)),
        ("volume",),
        (10, 60),
    ),
    "scented candle": (
        "home › candles › scented candles",
        "scented candles",
        (("soy wax",), ("long burning",), ("glass jar", "metal tin")),
        ("scent", "pack"),
        (8, 40),
    ),
    "protein bars": (
        "grocery › bars › protein bars",
        "protein bars",
        (("gluten free",), ("low sugar",), ("high protein",), ("keto friendly",)),
        ("flavor", "pack"),
        (12, 45),
    ),
    "ground coffee": (
        "grocery › coffee › ground coffee",
        "ground coffee",
        (("medium roast", "dark roast", "light roast"), ("organic",), ("fair trade",)),
        ("weight",),
        (7, 35),
    ),
    "green tea": (
        "grocery › tea › green tea",
        "green tea bags",
        (("organic",), ("caffeine free", "caffeinated"), ("individually wrapped",)),
        ("pack",),
        (5, 25),
    ),
    "trail mix": (
        "grocery › nuts › trail mix",
        "trail mix",
        (("non gmo",), ("no added sugar",), ("resealable bag",), ("gluten free",)),
        ("flavor", "weight"),
        (6, 30),
    ),
    "phone case": (
        "electronics › phone cases › cases",
        "phone cases",
        (("shockproof",), ("slim",), ("clear", "matte"), ("wireless charging compatible",)),
        ("color", "model"),
        (7, 35),
    ),
    "usb c cable": (
        "electronics › cables › usb cables",
        "usb c cables",
        (("fast charging",), ("braided nylon",), ("data transfer",)),
        ("color", "length"),
        (6, 25),
    ),
    "wireless earbuds": (
        "electronics › headphones › earbuds",
        "wireless earbuds",
        (("noise cancelling",), ("waterproof",), ("long battery life",), ("bluetooth 5.3",)),
        ("color",),
        (20, 150),
    ),
    "power bank": (
        "electronics › chargers › power banks",
        "portable chargers",
        (("fast charging",), ("usb c",), ("compact",), ("led display",)),
        ("color",),
        (15, 60),
    ),
}

_SYLLABLES = ("nor", "del", "ka", "ri", "vo", "sta", "lu", "men", "tor", "qui", "za", "bel", "fin", "ox", "ar", "lin")
_OPENERS = ("i am looking for", "i need", "find me", "i want to buy", "please find")


@functools.lru_cache(maxsize=1)
def _brands() -> tuple[str, ...]:
    rng = random.Random("webshop-brands")
    names: set[str] = set()
    while len(names) < 60:
        names.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize())
    return tuple(sorted(names))


def _asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _make_product(rng: random.Random, type_name: str, taken: set[str]) -> Product:
    path, query, groups, option_kinds, (lo, hi) = PRODUCT_TYPES[type_name]
    brand = rng.choice(_brands())
    k = min(len(groups), rng.randint(2, 4))
    chosen = sorted(rng.sample(range(len(groups)), k))
    attributes = tuple(rng.choice(groups[i]) for i in chosen)
    options = {}
    for kind in option_kinds:
        values = OPTION_VALUES[kind]
        n = rng.randint(min(3, len(values)), len(values))
        keep = set(rng.sample(values, n))
        options[kind] = tuple(v for v in values if v in keep)
    price = round(rng.uniform(lo, hi), 0) - 0.01
    in_title = [a for a in attributes if rng.random() < 0.6]
    title = " ".join([brand, *in_title, type_name]).title()
    description = f"This {type_name} from {brand} is {', '.join(attributes[:-1])} and {attributes[-1]}."
    if len(attributes) == 1:
        description = f"This {type_name} from {brand} is {attributes[0]}."
    bullets = tuple(f"{a.capitalize()}" for a in attributes) + (f"Sold by {brand}",)
    dept = path.split(" › ")[0]
    return Product(
        asin=_asin(rng, taken),
        title=title,
        price=price,
        price_text=f"${price:.2f}",
        options=options,
        attributes=attributes,
        category=dept,
        query=query,
        product_category=" › ".join(p.title() for p in path.split(" › ")),
        description=description,
        bullets=bullets,
    )


@functools.lru_cache(maxsize=4)
def generate_catalog(num_products: int = 3000, seed: int = 0) -> tuple[Product, ...]:
    """``num_products`` generated products, deterministic in ``seed`` (types in turn, shuffled)."""
    if num_products < 1:
        raise ValueError(f"num_products must be a positive integer, got {num_products!r}")
    rng = random.Random(f"webshop-catalog:{int(seed)}")
    types = list(PRODUCT_TYPES)
    taken: set[str] = set()
    products = [_make_product(rng, types[i % len(types)], taken) for i in range(num_products)]
    rng.shuffle(products)
    return tuple(products)


def budget_for(price: float, rng: random.Random) -> float:
    """WebShop's budget for a product of ``price``: the larger of two of the next four $10 steps
    above the price (1,000,000, i.e. no real limit, when fewer than two steps are left).

    Example:
        >>> budget_for(23.5, random.Random(0)) in (40.0, 50.0, 60.0)
        True
    """
    steps = [p for p in PRICE_STEPS if p > price][:4]
    if len(steps) < 2:
        return 1_000_000.0
    return max(rng.sample(steps, 2))


def _type_of(product: Product) -> str:
    for name in sorted(PRODUCT_TYPES, key=len, reverse=True):
        if product.title.lower().endswith(name):
            return name
    return product.title.lower()


def generate_goals(products: Sequence[Product], seed: int = 0) -> tuple[Goal, ...]:
    """One instruction per generated product (deterministic in ``seed`` and the product)."""
    goals = []
    for product in products:
        rng = random.Random(f"webshop-goal:{int(seed)}:{product.asin}")
        attrs = list(product.attributes)
        attrs = sorted(rng.sample(attrs, min(2, len(attrs))), key=attrs.index)
        names = tuple(product.options)
        values = tuple(rng.choice(product.options[n]) for n in names)
        budget = budget_for(product.price, rng)
        opts = "".join(f"{', and' if i else ' with'} {n}: {v}" for i, (n, v) in enumerate(zip(names, values)))
        price = f", and price lower than {budget:.2f} dollars" if budget < 1_000_000 else ""
        text = f"{rng.choice(_OPENERS)} {' '.join(attrs)} {_type_of(product)}{opts}{price}"
        goals.append(
            Goal(
                asin=product.asin,
                instruction=text,
                attributes=tuple(attrs),
                options=values,
                price_upper=budget,
                name=product.title,
                query=product.query,
                product_category=product.product_category,
                option_names=names,
            )
        )
    return tuple(goals)

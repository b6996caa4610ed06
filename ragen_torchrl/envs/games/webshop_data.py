"""Readers for the user's own WebShop files: the product catalogue, attributes and goals.

Formats (those of github.com/princeton-nlp/WebShop's ``data/`` folder):

* **products** (``items_shuffle.json`` / ``items_shuffle_1000.json``): a JSON array (or JSON lines) of
  records with ``asin`` and ``name`` (or ``title``/``Title``), and optionally ``pricing`` (``"$12.99"``,
  ``"$10.71 - $18.34"``, a number or a list of numbers; missing: $100 as in WebShop),
  ``customization_options`` (``{"color": [{"value": "Black"}, ...], "size": [...]}``, values may also be
  plain strings), ``full_description`` / ``description``, ``small_description`` (feature bullets, list
  or string), ``category``, ``query``, ``product_category`` and ``attributes``. As WebShop does, records
  whose asin is ``nan`` or longer than 10 characters and repeated asins are skipped; option values are
  lowercased with ``/`` shown as `` | ``; a price range charges one price drawn in the range (seeded by
  the asin, so runs agree).
* **attributes** (``items_ins_v2.json`` / ``items_ins_v2_1000.json``): ``{asin: {"attributes": [...],
  "instruction": ..., "instruction_attributes": [...]}}``; gives the products their attributes and,
  without a goal file, WebShop's synthetic goals (one per product with an instruction, with one option
  combination drawn per product).
* **goals**: WebShop's human instructions (``items_human_ins.json``: ``{asin: [{"instruction",
  "instruction_attributes", "instruction_options"}, ...]}``), or a JSON array / JSON lines of goal
  records ``{"asin", "instruction" (or "instruction_text"), "instruction_attributes" (or "attributes"),
  "instruction_options" (or "goal_options": list or {name: value}), "price_upper" (optional)}``.
  Goals whose asin is not in the catalogue are skipped (as WebShop builds goals from loaded products);
  goals without attributes are skipped (as WebShop does). A missing ``price_upper`` is drawn as WebShop
  does (:func:`~ragen_torchrl.envs.games.webshop_catalog.budget_for`) and appended to the instruction.

Every error names the file, the record (line or key) and the expected fields.

Example:
    >>> import json, tempfile
    >>> rec = {"asin": "B0TEST0001", "name": "Red Mug", "pricing": "$9.99",
    ...        "customization_options": {"Color": [{"value": "Red"}, {"value": "Blue/White"}]}}
    >>> with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    ...     _ = f.write(json.dumps([rec]))
    >>> p = load_products(f.name)[0]
    >>> p.price, p.options
    (9.99, {'color': ('red', 'blue | white')})
"""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .records import RecordError, iter_records, read_json_document
from .webshop_catalog import budget_for
from .webshop_reward import Goal, Product

__all__ = ["load_products", "load_attributes", "load_goals", "synthetic_goals", "PRODUCT_FIELDS", "GOAL_FIELDS"]

PRODUCT_FIELDS = "fields 'asin' and 'name' (optional 'pricing', 'customization_options', 'full_description', ...)"
GOAL_FIELDS = (
    "fields 'asin', 'instruction' and 'instruction_attributes' (optional 'instruction_options', 'price_upper'), "
    "or WebShop's items_human_ins.json mapping of asin -> list of such records"
)
_PRICE_RE = re.compile(r"\d+(?:\.\d+)?")
#: the largest price or budget (dollars) a file may give; larger ones (``1e400``) are refused
MAX_PRICE = 1e9


def _read_json(path: str, expected: str) -> Any:
    """A JSON object (read whole), or the ``(line, record)`` pairs of a JSON array / JSON lines (streamed)."""
    if not os.path.isfile(path):
        raise RecordError(f"{path}: file not found (expected {expected})")
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"{") and not path.endswith(".jsonl"):
        try:
            return read_json_document(path, expected)
        except RecordError as exc:
            if "(Extra data at" not in str(exc):  # else: JSON lines of objects, read below
                raise
    return iter_records(path, expected)


def _price(value: Any, where: str, field: str) -> float:
    """A finite price in [0, MAX_PRICE] (a 400-digit price overflows a float)."""
    try:
        price = float(value)
    except OverflowError:
        price = math.inf
    if not 0.0 <= price <= MAX_PRICE:  # also false for NaN
        raise RecordError(f"{where}: field {field!r}: price {str(value)[:40]} is not in [0, {MAX_PRICE:g}]")
    return price


def _pricing(value: Any, where: str) -> list[float]:
    if value is None or value == "" or value == []:
        return [100.0]
    if isinstance(value, bool):
        raise ValueError(f"{where}: 'pricing' must be a price text, a number or a list of numbers, got {value!r}")
    if isinstance(value, (int, float)):
        return [_price(value, where, "pricing")]
    if isinstance(value, str):
        prices = [_price(x, where, "pricing") for x in _PRICE_RE.findall(value.replace(",", ""))]
        return prices[:2] or [100.0]
    if isinstance(value, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        return [_price(x, where, "pricing") for x in value[:2]] or [100.0]
    raise ValueError(f"{where}: 'pricing' must be a price text, a number or a list of numbers, got {value!r}")


def _options(value: Any, where: str) -> dict[str, tuple[str, ...]]:
    if not value:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: 'customization_options' must be an object of option name -> list of values")
    out: dict[str, tuple[str, ...]] = {}
    for name, contents in value.items():
        if contents is None:
            continue
        if not isinstance(contents, list):
            raise ValueError(f"{where}: option {name!r} must be a list of values, got {type(contents).__name__}")
        values = []
        for c in contents:
            v = c.get("value") if isinstance(c, Mapping) else c
            if not isinstance(v, (str, int, float)) or isinstance(v, bool) or not str(v).strip():
                raise ValueError(f"{where}: option {name!r} has a value without text: {c!r}")
            values.append(str(v).strip().replace("/", " | ").lower())
        if values:
            out[str(name).lower()] = tuple(dict.fromkeys(values))
    return out


def _strings(value: Any, where: str, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v for v in value if v.strip())
    raise ValueError(f"{where}: {name!r} must be a string or a list of strings, got {value!r}")


def load_attributes(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """WebShop's attribute file (``items_ins_v2*.json``): ``{asin: {"attributes": [...], ...}}``."""
    path = os.path.expanduser(os.fspath(path))
    expected = "a JSON object of asin -> {'attributes': [...], 'instruction': ..., 'instruction_attributes': [...]}"
    data = _read_json(path, expected)
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected {expected}")
    for asin, rec in data.items():
        if not isinstance(rec, Mapping):
            raise ValueError(f"{path}, key {asin!r}: expected {expected}")
    return dict(data)


def load_products(
    path: str | os.PathLike, attributes: Mapping[str, Mapping[str, Any]] | None = None, limit: int | None = None
) -> list[Product]:
    """Products of a WebShop product file (see the module docstring for the fields).

    Raises:
        ValueError: a missing file, invalid JSON, a record without ``asin``/``name`` or with a malformed
            field (the message names the file, the record and the expected fields), or no products.
    """
    path = os.path.expanduser(os.fspath(path))
    data = _read_json(path, f"a JSON array of product records with {PRODUCT_FIELDS}")
    if isinstance(data, Mapping):
        raise ValueError(f"{path}: expected a JSON array of product records with {PRODUCT_FIELDS}, got one object")
    products, seen = [], set()
    for line, rec in data:
        where = f"{path}, record {line}"
        if not isinstance(rec, Mapping):
            raise ValueError(f"{where}: expected an object with {PRODUCT_FIELDS}")
        asin, name = rec.get("asin"), rec.get("name", rec.get("title", rec.get("Title")))
        if not isinstance(asin, str) or not asin.strip() or not isinstance(name, str) or not name.strip():
            raise ValueError(
                f"{where}: missing or empty 'asin' or 'name' (keys {sorted(rec)}); expected {PRODUCT_FIELDS}"
            )
        asin = asin.strip()
        if asin == "nan" or len(asin) > 10 or asin.lower() in seen:
            continue
        seen.add(asin.lower())
        pricing = _pricing(rec.get("pricing"), where)
        price = pricing[0] if len(pricing) == 1 else round(random.Random(f"price:{asin}").uniform(*pricing), 2)
        price_text = " to ".join(f"${p:g}" if p != int(p) else f"${p:.1f}" for p in pricing)
        extra = (attributes or {}).get(asin, {})
        attrs = _strings(extra.get("attributes", rec.get("attributes", rec.get("Attributes"))), where, "attributes")
        description = rec.get("full_description", rec.get("description", rec.get("Description", "")))
        bullets = rec.get("small_description", rec.get("BulletPoints"))
        products.append(
            Product(
                asin=asin,
                title=" ".join(name.split()),
                price=float(price),
                price_text=price_text,
                options=_options(rec.get("customization_options", rec.get("options")), where),
                attributes=attrs,
                category=str(rec.get("category") or ""),
                query=str(rec.get("query") or "").lower().strip(),
                product_category=str(rec.get("product_category") or ""),
                description=str(description or ""),
                bullets=_strings(bullets, where, "small_description"),
            )
        )
        if limit is not None and len(products) >= limit:
            break
    if not products:
        raise ValueError(f"{path}: no usable product records; expected {PRODUCT_FIELDS}")
    return products


def _goal(product: Product, text: str, attrs: Sequence[str], options: Any, price_upper: Any, where: str) -> Goal:
    names: tuple[str, ...] = ()
    if isinstance(options, Mapping):
        names, options = tuple(str(k) for k in options), list(options.values())
    values = _strings(options if options is not None else [], where, "instruction_options")
    text = text.strip().rstrip(".")
    if price_upper is None:
        price_upper = budget_for(product.price, random.Random(f"budget:{product.asin}:{text}"))
        if price_upper < 1_000_000:
            text += f", and price lower than {price_upper:.2f} dollars"
    elif isinstance(price_upper, bool) or not isinstance(price_upper, (int, float)):
        raise ValueError(f"{where}: 'price_upper' must be a number, got {price_upper!r}")
    return Goal(
        asin=product.asin,
        instruction=text,
        attributes=tuple(attrs),
        options=tuple(v.lower() for v in values),
        price_upper=_price(price_upper, where, "price_upper"),
        name=product.title,
        query=product.query,
        product_category=product.product_category,
        option_names=names,
    )


def load_goals(path: str | os.PathLike, products: Sequence[Product]) -> list[Goal]:
    """Goals of a WebShop goal file for ``products`` (see the module docstring for the formats).

    Raises:
        ValueError: a missing file, invalid JSON, a malformed record (names the file, the record and
            :data:`GOAL_FIELDS`), or no goal for a product of the catalogue.
    """
    path = os.path.expanduser(os.fspath(path))
    data = _read_json(path, f"goal records with {GOAL_FIELDS}")
    by_asin = {p.asin: p for p in products}
    if isinstance(data, Mapping):  # items_human_ins.json: asin -> [instruction records]
        rows = []
        for asin, recs in data.items():
            if not isinstance(recs, list):
                raise ValueError(f"{path}, key {asin!r}: expected a list of instruction records with {GOAL_FIELDS}")
            rows += [
                (f"key {asin!r}, item {i}", dict(r, asin=asin) if isinstance(r, Mapping) else r)
                for i, r in enumerate(recs)
            ]
    else:
        rows = [(f"record {line}", rec) for line, rec in data]
    goals = []
    for label, rec in rows:
        where = f"{path}, {label}"
        if not isinstance(rec, Mapping):
            raise ValueError(f"{where}: expected an object with {GOAL_FIELDS}")
        text = rec.get("instruction", rec.get("instruction_text"))
        attrs = rec.get("instruction_attributes", rec.get("attributes"))
        if not isinstance(rec.get("asin"), str) or not isinstance(text, str) or not text.strip() or attrs is None:
            raise ValueError(
                f"{where}: missing 'asin', 'instruction' or 'instruction_attributes' (keys {sorted(rec)}); expected {GOAL_FIELDS}"
            )
        attrs = _strings(attrs, where, "instruction_attributes")
        product = by_asin.get(rec["asin"].strip())
        if product is None or not attrs:
            continue
        options = rec.get("instruction_options", rec.get("goal_options"))
        goals.append(_goal(product, text, attrs, options, rec.get("price_upper"), where))
    if not goals:
        raise ValueError(
            f"{path}: no goal for a product of the catalogue (goals need an 'asin' of the catalogue and attributes)"
        )
    return goals


def synthetic_goals(
    products: Sequence[Product], attributes: Mapping[str, Mapping[str, Any]], source: str
) -> list[Goal]:
    """WebShop's synthetic goals: per product with an ``instruction`` in the attribute file, its
    instruction plus one option combination (drawn per product) and a budget.

    Raises:
        ValueError: no product has an instruction in the attribute file (names ``source``).
    """
    goals = []
    for product in products:
        extra = attributes.get(product.asin) or {}
        text, attrs = extra.get("instruction"), extra.get("instruction_attributes")
        if not isinstance(text, str) or not text.strip() or not attrs:
            continue
        where = f"{source}, key {product.asin!r}"
        rng = random.Random(f"options:{product.asin}")
        combo = {name: rng.choice(values) for name, values in sorted(product.options.items())}
        opts = ", and ".join(f"{k}: {v}" for k, v in combo.items())
        goals.append(
            _goal(
                product,
                text.strip().rstrip(".") + (f" with {opts}" if opts else ""),
                _strings(attrs, where, "instruction_attributes"),
                combo,
                None,
                where,
            )
        )
    if not goals:
        raise ValueError(
            f"{source}: no product of the catalogue has an 'instruction' and 'instruction_attributes'; pass a goal file as data_path"
        )
    return goals

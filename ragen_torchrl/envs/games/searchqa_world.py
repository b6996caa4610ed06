"""The shipped offline SearchQA set: a GENERATED multi-hop world (invented facts, not real data).

:func:`generate_world` builds, deterministically from a seed, a small world of invented entities
(countries, cities, people, companies; names made of random syllables) with attributes and
relations, one passage per fact (each passage states exactly one fact), and questions that need one
or two hops over those facts:

* one hop: "Where was Orvane Dask born?", "Who founded Kelvari Works?", "In which country is Telmora?", ...
* two hops: "Where was the founder of Kelvari Works born?" (founder, then birthplace), "In which
  country was Orvane Dask born?" (birthplace, then country), ...

Each question carries its :class:`Hop` chain: the supporting passage of every hop and a search query
that retrieves it (the subject's name and the words of the relation as the passage phrases it). The
oracle of :class:`~ragen_torchrl.envs.games.searchqa.SearchQAGame` searches hop by hop and then
answers. With the default sizes the world has 300 passages and 480 questions (300 one-hop, 180
two-hop): small enough that a tiny model can learn the search-then-answer pattern, and every answer
is a span of a passage.

This is a synthetic test world for offline runs and the test suite, **not** HotpotQA or any
benchmark; for the real task load your own files (:mod:`.searchqa_data`).

Example:
    >>> world = generate_world(0)
    >>> len(world.passages), len(world.questions)
    (300, 480)
    >>> q = next(q for q in world.questions if q.question.startswith("Where was the founder of"))
    >>> len(q.hops), q.answers == (q.hops[-1].value,)
    (2, True)
"""

from __future__ import annotations

import functools
import random
from typing import NamedTuple

from .retrieval import Passage

__all__ = ["Hop", "QAItem", "World", "generate_world"]

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "th", "nd", "rk")
OCCUPATIONS = (
    "painter",
    "engineer",
    "sailor",
    "chemist",
    "architect",
    "composer",
    "farmer",
    "surgeon",
    "poet",
    "astronomer",
    "baker",
    "lawyer",
)
COMPANY_KINDS = ("Works", "Systems", "Foods", "Motors", "Press", "Labs", "Textiles", "Shipping")


class Hop(NamedTuple):
    """One step of a question's reasoning chain.

    Attributes:
        query: a search query that retrieves the supporting passage.
        passage_id: the supporting passage.
        need: what this hop looks up, in words ("the founder of Kelvari Works").
        value: the fact's value (the next hop's subject, or the answer on the last hop).
    """

    query: str
    passage_id: str
    need: str
    value: str


class QAItem(NamedTuple):
    """A question, its gold answers and (for generated questions) its hop chain."""

    question: str
    answers: tuple[str, ...]
    hops: tuple[Hop, ...] = ()


class World(NamedTuple):
    """A generated world: its passages (one fact each) and its questions."""

    seed: int
    passages: tuple[Passage, ...]
    questions: tuple[QAItem, ...]


def _word(rng: random.Random, syllables: int) -> str:
    parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)]
    return ("".join(parts) + rng.choice(_CODAS)).capitalize()


def _names(rng: random.Random, n: int, make, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        name = make()
        # unique names, and no name that is a word of another (keeps the retrieval unambiguous)
        words = set(name.lower().split())
        if name in taken or words & {w for t in taken for w in t.lower().split()}:
            continue
        taken.add(name)
        out.append(name)
    return out


@functools.lru_cache(maxsize=4)
def generate_world(
    seed: int = 0, num_countries: int = 6, num_cities: int = 30, num_people: int = 60, num_companies: int = 30
) -> World:
    """The generated world of ``seed`` (see the module docstring); cached, deterministic across runs.

    Raises:
        ValueError: sizes that cannot make a world (a company needs a founder of its own).
    """
    if min(num_countries, num_cities, num_people, num_companies) < 1 or num_companies > num_people:
        raise ValueError(
            "generate_world needs at least one of each entity and no more companies than people, got "
            f"{num_countries=}, {num_cities=}, {num_people=}, {num_companies=}"
        )
    rng = random.Random(f"searchqa-world:{int(seed)}")
    taken: set[str] = set()
    countries = _names(rng, num_countries, lambda: _word(rng, 2) + rng.choice(("ia", "land", "mark")), taken)
    cities = _names(rng, num_cities, lambda: _word(rng, rng.choice((2, 3))), taken)
    # a person's two names are fresh words; first names may not repeat either
    people = _names(rng, num_people, lambda: f"{_word(rng, 2)} {_word(rng, rng.choice((1, 2)))}", taken)
    companies = _names(rng, num_companies, lambda: _word(rng, rng.choice((2, 3))), taken)
    companies = [f"{name} {rng.choice(COMPANY_KINDS)}" for name in companies]

    country_of = {c: rng.choice(countries) for c in cities}
    born_in = {p: rng.choice(cities) for p in people}
    born_year = {p: str(rng.randint(1880, 1990)) for p in people}
    job = {p: rng.choice(OCCUPATIONS) for p in people}
    founder = dict(zip(companies, rng.sample(people, len(companies))))
    hq = {c: rng.choice(cities) for c in companies}
    founded = {c: str(rng.randint(int(born_year[founder[c]]) + 20, 2020)) for c in companies}

    passages: list[Passage] = []
    support: dict[tuple[str, str], str] = {}

    def fact(subject: str, relation: str, text: str) -> None:
        pid = f"w{seed}-{len(passages)}"
        passages.append(Passage(pid, subject, text))
        support[subject, relation] = pid

    for c in cities:
        fact(c, "country", f"{c} is a city in the country of {country_of[c]}.")
    for p in people:
        fact(p, "born", f"{p} was born in the city of {born_in[p]}.")
        fact(p, "year", f"{p} was born in the year {born_year[p]}.")
        fact(p, "job", f"The occupation of {p} is {job[p]}.")
    for c in companies:
        fact(c, "founder", f"The founder of {c} is {founder[c]}.")
        fact(c, "hq", f"The headquarters of {c} are in the city of {hq[c]}.")
        fact(c, "founded", f"{c} was founded in the year {founded[c]}.")

    # relation -> (search words, "what is looked up" phrase, value lookup)
    relations = {
        "country": ("country", "the country of {}", country_of),
        "born": ("born city", "the city where {} was born", born_in),
        "year": ("born year", "the year {} was born", born_year),
        "job": ("occupation", "the occupation of {}", job),
        "founder": ("founder", "the founder of {}", founder),
        "hq": ("headquarters city", "the headquarters city of {}", hq),
        "founded": ("founded year", "the year {} was founded", founded),
    }

    def hop(subject: str, relation: str) -> Hop:
        words, need, values = relations[relation]
        return Hop(f"{subject} {words}", support[subject, relation], need.format(subject), values[subject])

    questions: list[QAItem] = []

    def ask(question: str, *chain: tuple[str, str]) -> None:
        hops, subject = [], chain[0][0]
        for _, relation in chain:
            hops.append(hop(subject, relation))
            subject = hops[-1].value
        questions.append(QAItem(question, (hops[-1].value,), tuple(hops)))

    for c in cities:
        ask(f"In which country is {c}?", (c, "country"))
    for p in people:
        ask(f"Where was {p} born?", (p, "born"))
        ask(f"In what year was {p} born?", (p, "year"))
        ask(f"What is the occupation of {p}?", (p, "job"))
        ask(f"In which country was {p} born?", (p, "born"), (None, "country"))
    for c in companies:
        ask(f"Who founded {c}?", (c, "founder"))
        ask(f"In which city are the headquarters of {c}?", (c, "hq"))
        ask(f"In what year was {c} founded?", (c, "founded"))
        ask(f"Where was the founder of {c} born?", (c, "founder"), (None, "born"))
        ask(f"In what year was the founder of {c} born?", (c, "founder"), (None, "year"))
        ask(f"What is the occupation of the founder of {c}?", (c, "founder"), (None, "job"))
        ask(f"In which country are the headquarters of {c}?", (c, "hq"), (None, "country"))
    return World(int(seed), tuple(passages), tuple(questions))

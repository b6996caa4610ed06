"""PreferenceEstimation (T3 active reasoning): estimate a hidden preference vector by comparisons.

**Task.** A user has a hidden preference vector ``v*`` over ``dim`` item attributes (default 8
non-negative weights, as in the reference: ``v*`` is uniform on the non-negative part of the unit
sphere; ``nonnegative=False`` allows negative weights). ``num_items`` items (default 20) have
attribute vectors in ``[0, 1]^dim`` (2 decimals), listed with 1-based ids. The user prefers item
``a`` over ``b`` when ``v*·x_a > v*·x_b``.

**Queries.** Pairwise questions only, as in the reference (no query reveals a score):
``"Would you prefer item 3 over item 7?"`` (also ``"prefer 3 over 7"``, ``"compare 3 7"``,
``"3 vs 7"``) is answered ``Yes`` / ``Equal`` / ``No`` (``"Yes: the user prefers item 3 over item
7."``). The agent reports its running estimate ``v̂_t`` in the same query:
``"Would you prefer item 3 over item 7? estimate: 0.5, 0.1, ..."``; an estimate-only query
(``"estimate: ..."``) is valid too and just records the estimate. The estimate written at turn t
reflects what the agent knew *before* that turn's feedback. A query that cannot be parsed as a
whole (bad ids, a pair of equal ids, an estimate of the wrong length) is invalid and changes
nothing.

**Answer.** The final estimate, e.g. ``"0.5, -0.1, 0.3, 0.2"`` (brackets and an ``estimate:`` prefix
are fine). Reward 1.0 iff ``cos(v̂, v*) > threshold`` (0.88), else 0.0 (binary similarity).
``max_turns`` = 10.

**Progress.** ``progress()`` = ``cos(v̂_t, v*)`` — *higher is closer* (the opposite of
:class:`TextGame`'s default sense). With ``estimate_source="agent"`` (default) ``v̂_t`` is the
latest estimate the agent reported (0.0 before any); with ``estimate_source="observations"`` it is
the closed-form estimate from the comparisons, ``normalise(sum_i unit(x_winner_i - x_loser_i))``
(0.0 before any comparison), which needs nothing from the agent. The demonstrator reports the
posterior mean of a sample-based belief (see :class:`PreferencePosterior`) in every query.

Example:
    >>> game = PreferenceEstimationGame([[1.0, 0.0], [0.0, 1.0]], [0.8, 0.6])
    >>> game.interact("Would you prefer item 1 over item 2? estimate: 1, 1")[0]
    'Yes: the user prefers item 1 over item 2.'
    >>> round(game.progress(), 3)
    0.99
    >>> game.answer("0.8, 0.6")[0]
    1.0
"""

from __future__ import annotations

import math
import random
import re
from typing import Any, Sequence

from ragen_torchrl.envs.games.interactive import InteractiveGame
from ragen_torchrl.envs.parsing import safe_int

__all__ = [
    "PreferenceEstimationGame",
    "PreferencePosterior",
    "comparison_estimate",
    "cosine",
    "format_vector",
    "pair_answer",
    "parse_pair",
    "parse_vector",
    "split_estimate",
]

Vector = list[float]


# ---- vector helpers (pure Python) ------------------------------------------------------------
def dot(u: Sequence[float], v: Sequence[float]) -> float:
    return sum(a * b for a, b in zip(u, v))


def norm(v: Sequence[float]) -> float:
    return math.sqrt(dot(v, v))


def normalize(v: Sequence[float]) -> Vector:
    n = norm(v)
    return [x / n for x in v] if n > 0 else [0.0 for _ in v]


def cosine(u: Sequence[float] | None, v: Sequence[float] | None) -> float:
    """Cosine similarity; 0.0 when either vector is missing or zero."""
    if u is None or v is None:
        return 0.0
    nu, nv = norm(u), norm(v)
    if nu == 0 or nv == 0:
        return 0.0
    return max(-1.0, min(1.0, dot(u, v) / (nu * nv)))


def format_vector(v: Sequence[float], digits: int = 2) -> str:
    return ", ".join(f"{x:.{digits}f}" for x in v)


_NUMBER_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def parse_vector(text: str, dim: int | None = None) -> Vector | None:
    """Numbers in ``text`` as a vector (``None`` if none, non-finite, or not ``dim`` long)."""
    if not isinstance(text, str) or len(text) > 2000:
        return None
    body = re.sub(r"^\s*[A-Za-z][A-Za-z _\-]{0,30}[:=]", "", text)
    if re.search(r"[A-Za-z]", re.sub(r"[eE][-+]?\d", "", body)):
        return None
    nums = _NUMBER_RE.findall(body)
    if not nums:
        return None
    vec = [float(x) for x in nums]
    if any(not math.isfinite(x) for x in vec):
        return None
    if dim is not None and len(vec) != dim:
        return None
    return vec


_ESTIMATE_RE = re.compile(r"(?:^|[;,\s])estimate\s*[:=]?", re.IGNORECASE)


def split_estimate(query: str) -> tuple[str, str | None]:
    """``"compare 1 2; estimate: 0.1, 0.2"`` -> ``("compare 1 2", "0.1, 0.2")``."""
    m = _ESTIMATE_RE.search(query or "")
    if not m:
        return (query or "").strip(), None
    body = query[: m.start()].strip().rstrip(";,").strip()
    return body, query[m.end() :].strip()


_COMPARE_RE = re.compile(
    r"^\s*(?:compare\s*)?(?:items?\s*)?#?(\d+)\s*(?:,|vs\.?|versus|and|with|to|\s)\s*"
    r"(?:items?\s*)?#?(\d+)\s*\.?\s*$",
    re.IGNORECASE,
)


_PREFER_RE = re.compile(
    r"^\s*(?:would|do|does)?\s*(?:you|the\s+user)?\s*prefer\s+(?:items?\s*)?#?(\d+)\s+"
    r"(?:over|to|than)\s+(?:items?\s*)?#?(\d+)\s*[?.]?\s*$",
    re.IGNORECASE,
)


def _squash(text: str) -> str:
    # one space per whitespace run: the question regexes have neighbouring \s* pieces, which
    # backtrack cubically over a long run of spaces (seconds for 2,000 spaces)
    return " ".join(text.split()) if isinstance(text, str) else ""


def _ids(m: re.Match[str]) -> tuple[int, int]:
    # safe_int: ids of more than 18 digits are clamped (out of range) instead of raising
    # int()'s ValueError beyond 4300 digits
    return safe_int(m.group(1)), safe_int(m.group(2))


def parse_compare(text: str) -> tuple[int, int] | None:
    """``"compare 3 7"`` -> ``(3, 7)`` (ids as written); ``None`` if not a comparison.

    Never raises: an id of more than 18 digits comes back clamped to ``10**18`` (out of
    range for every instance).

    Example:
        >>> parse_compare("compare 3 7"), parse_compare("3 vs " + "9" * 10_000) == (3, 10**18)
        ((3, 7), True)
    """
    m = _COMPARE_RE.match(_squash(text))
    return _ids(m) if m else None


def parse_pair(text: str) -> tuple[int, int] | None:
    """A pairwise question -> the two ids as written; ``None`` if it is not one.

    Never raises (ids of more than 18 digits are clamped, as in :func:`parse_compare`).

    Example:
        >>> parse_pair("Would you prefer item 3 over item 7?"), parse_pair("compare 3 7")
        ((3, 7), (3, 7))
        >>> parse_pair("rate 3") is None
        True
    """
    m = _PREFER_RE.match(_squash(text))
    if m:
        return _ids(m)
    return parse_compare(text)


#: utilities closer than this are "Equal" (attributes have 2 decimals, so real ties are exact)
EQUAL_TOL = 1e-9


def pair_answer(u_first: float, u_second: float, tol: float = EQUAL_TOL) -> str:
    """The user's reply to "Would you prefer the first over the second?": Yes / Equal / No.

    Example:
        >>> pair_answer(0.5, 0.2), pair_answer(0.2, 0.2), pair_answer(0.1, 0.2)
        ('Yes', 'Equal', 'No')
    """
    if abs(u_first - u_second) <= tol:
        return "Equal"
    return "Yes" if u_first > u_second else "No"


def ask_pair(
    asked: set, comparisons: list[tuple[int, int]], a: int, b: int, u_a: float, u_b: float
) -> tuple[str, tuple[int, int] | None, bool, bool]:
    """Answer "Would you prefer a over b?" and record it in the game's question log.

    Adds the pair to ``asked`` and, unless the answer is Equal, ``(winner, loser)`` to
    ``comparisons``. Returns ``(reply, (winner, loser) or None, repeated, observed)``:
    ``repeated`` -- the pair was asked before; ``observed`` -- the ordering is new evidence.

    Example:
        >>> asked, comps = set(), []
        >>> ask_pair(asked, comps, 0, 1, 0.2, 0.5), comps
        (('No', (1, 0), False, True), [(1, 0)])
        >>> ask_pair(asked, comps, 1, 0, 0.5, 0.2)   # the same pair again, same ordering
        ('Yes', (1, 0), True, False)
    """
    key = frozenset((a, b))
    repeated = key in asked
    asked.add(key)
    reply = pair_answer(u_a, u_b)
    if reply == "Equal":
        return reply, None, repeated, False
    order = (a, b) if reply == "Yes" else (b, a)
    observed = order not in comparisons
    comparisons.append(order)
    return reply, order, repeated, observed


def comparison_estimate(items: Sequence[Sequence[float]], comparisons: Sequence[tuple[int, int]]) -> Vector | None:
    """Closed-form estimate from ``(winner, loser)`` index pairs (0-based):
    ``normalise(sum unit(x_w - x_l))``; ``None`` without comparisons."""
    if not comparisons:
        return None
    dim = len(items[0])
    acc = [0.0] * dim
    for w, l in comparisons:
        diff = normalize([a - b for a, b in zip(items[w], items[l])])
        acc = [a + d for a, d in zip(acc, diff)]
    return normalize(acc) if norm(acc) > 0 else None


def random_unit(rng: random.Random, dim: int, nonnegative: bool = False) -> Vector:
    """A uniform unit vector (on the non-negative part of the sphere with ``nonnegative``)."""
    while True:
        v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
        if nonnegative:
            v = [abs(x) for x in v]
        if norm(v) > 1e-9:
            return normalize(v)


class PreferencePosterior:
    """A particle belief over unit preference vectors, conditioned on comparisons.

    Particles start uniform on the sphere (its non-negative part with ``nonnegative``); every
    comparison ``(winner, loser)`` keeps the particles
    that agree. When fewer than ``min_particles`` remain, survivors are jittered (Gaussian noise,
    renormalised, kept only if consistent with every comparison) to refill the population —
    deterministic given ``seed``. Used by the demonstrators of PreferenceEstimation and
    MovieRecommendation.
    """

    def __init__(
        self,
        items: Sequence[Sequence[float]],
        num_particles: int = 500,
        seed: int | str = 0,
        min_particles: int = 100,
        nonnegative: bool = False,
    ) -> None:
        self.items = [list(map(float, x)) for x in items]
        self.nonnegative = bool(nonnegative)
        self.dim = len(self.items[0])
        self.num_particles = int(num_particles)
        self.min_particles = int(min_particles)
        self.rng = random.Random(f"PreferencePosterior/{seed}")
        self.constraints: list[Vector] = []  # d with d·v > 0
        self.particles = [random_unit(self.rng, self.dim, self.nonnegative) for _ in range(self.num_particles)]
        self._utils = [self._utilities(p) for p in self.particles]

    def _utilities(self, v: Sequence[float]) -> list[float]:
        return [dot(v, x) for x in self.items]

    def _consistent(self, v: Sequence[float]) -> bool:
        if self.nonnegative and any(x < 0 for x in v):
            return False
        return all(dot(c, v) > 0 for c in self.constraints)

    def observe(self, winner: int, loser: int) -> None:
        """Condition on ``items[winner]`` preferred over ``items[loser]`` (0-based)."""
        c = [a - b for a, b in zip(self.items[winner], self.items[loser])]
        if norm(c) == 0:
            return
        self.constraints.append(c)
        keep = [k for k, u in enumerate(self._utils) if u[winner] > u[loser]]
        self.particles = [self.particles[k] for k in keep]
        self._utils = [self._utils[k] for k in keep]
        if len(self.particles) < self.min_particles:
            self._rejuvenate()

    def _rejuvenate(self) -> None:
        seeds = list(self.particles)
        center = self.mean() if seeds else None
        if center is not None and len(seeds) > 1:
            spread = sum(norm([a - b for a, b in zip(p, center)]) for p in seeds) / len(seeds)
            sigma = max(0.02, min(0.3, spread))
        else:
            sigma = 0.3
        attempts = 0
        budget = 20 * self.num_particles
        while len(self.particles) < self.num_particles and attempts < budget:
            attempts += 1
            if seeds:
                base = seeds[attempts % len(seeds)]
                v = normalize([b + self.rng.gauss(0.0, sigma) for b in base])
            else:  # nothing survived (ties/rounding): sample afresh
                v = random_unit(self.rng, self.dim, self.nonnegative)
            if norm(v) > 0 and self._consistent(v):
                self.particles.append(v)
                self._utils.append(self._utilities(v))
                if not seeds:
                    seeds.append(v)
            if attempts % (2 * self.num_particles) == 0:
                sigma = max(0.01, sigma * 0.6)

    def mean(self) -> Vector | None:
        """Normalised particle mean (``None`` with no particles)."""
        if not self.particles:
            return None
        acc = [sum(p[i] for p in self.particles) for i in range(self.dim)]
        return normalize(acc) if norm(acc) > 0 else None

    def split(self, a: int, b: int) -> int:
        """How many particles prefer ``a`` over ``b`` (0-based)."""
        return sum(1 for u in self._utils if u[a] > u[b])

    def best_pair(self, candidates: Sequence[tuple[int, int]], max_eval: int = 250) -> tuple[int, int] | None:
        """The pair that splits the particles most evenly (ties: first); at most
        ``max_eval`` evenly spaced particles are scored."""
        utils = self._utils
        if len(utils) > max_eval:
            stride = len(utils) / max_eval
            utils = [utils[int(i * stride)] for i in range(max_eval)]
        best, best_val = None, -1
        n = len(utils)
        for a, b in candidates:
            wins = sum(1 for u in utils if u[a] > u[b])
            val = min(wins, n - wins)
            if val > best_val:
                best, best_val = (a, b), val
        return best


class PreferenceEstimationGame(InteractiveGame):
    """Estimate a hidden preference vector from pairwise comparisons (see module docstring).

    Info keys of an interaction: ``compared`` (1-based ``(a, b)`` or ``None``), ``reply``
    (``"Yes"``/``"Equal"``/``"No"`` or ``None``), ``preferred`` (1-based id, ``None`` for Equal),
    ``estimate`` (latest reported estimate as a list, or ``None``), ``estimate_reported`` (this
    query carried one), ``estimate_updated`` (``v̂_t`` was updated this turn: an estimate was
    reported, or with ``estimate_source="observations"`` a strict preference was observed),
    ``similarity`` (= ``progress()``), ``repeated_query``. ``action_is_effective``: a new pair was
    compared or an estimate reported.
    Answer info: ``valid``, ``estimate``, ``similarity`` (cos with ``v*``), ``success``, ``reward``.
    """

    max_turns = 10
    task_name = "PreferenceEstimation"
    ESTIMATE_SOURCES = ("agent", "observations")

    def __init__(
        self,
        items: Sequence[Sequence[float]],
        preference: Sequence[float],
        threshold: float = 0.88,
        estimate_source: str = "agent",
        max_turns: int | None = None,
        oracle_particles: int = 500,
        oracle_seed: int | str = 0,
        nonnegative: bool = False,
    ) -> None:
        super().__init__(max_turns)
        #: ``v*`` is known to be non-negative (told to the agent, used by the demonstrator's prior)
        self.nonnegative = bool(nonnegative)
        if estimate_source not in self.ESTIMATE_SOURCES:
            raise ValueError(f"estimate_source must be one of {self.ESTIMATE_SOURCES}, got {estimate_source!r}")
        if len(items) < 2:
            raise ValueError("need at least two items")
        self.items = [[float(a) for a in x] for x in items]
        self.dim = len(self.items[0])
        if any(len(x) != self.dim for x in self.items) or len(preference) != self.dim:
            raise ValueError("items and preference must share one dimension")
        if norm(preference) == 0:
            raise ValueError("preference must be non-zero")
        self.preference = [float(a) for a in preference]
        self.threshold = float(threshold)
        self.estimate_source = estimate_source
        self.estimate: Vector | None = None
        self.comparisons: list[tuple[int, int]] = []  # (winner, loser), 0-based
        self.asked: set[frozenset[int]] = set()
        self._oracle_particles = int(oracle_particles)
        self._oracle_seed = oracle_seed
        self._posterior: PreferencePosterior | None = None
        self._posterior_seen = 0

    @classmethod
    def generate(
        cls,
        seed: int,
        split: str = "train",
        num_items: int = 20,
        dim: int = 8,
        nonnegative: bool = True,
        **kwargs: Any,
    ) -> "PreferenceEstimationGame":
        """Random items and ``v*`` from a split-specific stream (``"train"``/``"val"`` draw from
        different seeds, so instances differ with probability 1). Defaults as the reference:
        8 non-negative preference dimensions."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        if int(dim) < 1 or int(num_items) < 2:
            raise ValueError(f"need dim >= 1 and num_items >= 2, got dim={dim}, num_items={num_items}")
        rng = random.Random(f"PreferenceEstimation/{split}/{int(seed)}")
        items = [[round(rng.random(), 2) for _ in range(dim)] for _ in range(num_items)]
        pref = [round(x, 4) for x in random_unit(rng, dim, nonnegative)]
        kwargs.setdefault("oracle_seed", f"{split}/{int(seed)}")
        return cls(items, pref, nonnegative=nonnegative, **kwargs)

    # ---- proxy -------------------------------------------------------------------------------
    def current_estimate(self) -> Vector | None:
        if self.estimate_source == "observations":
            return comparison_estimate(self.items, self.comparisons)
        return self.estimate

    def progress(self) -> float:
        return float(cosine(self.current_estimate(), self.preference))

    # ---- text --------------------------------------------------------------------------------
    def _describe(self) -> str:
        lines = [
            f"Estimate a user's hidden preference weights over {self.dim} item attributes"
            + (" (every weight is non-negative)" if self.nonnegative else "")
            + ". The user prefers the item with the larger weighted sum of attributes. "
            "Ask <interact>Would you prefer item A over item B? estimate: w1, ..., wd</interact>; "
            "the user answers Yes, Equal or No. State your current estimate of the weights in each "
            f"question; finish with <answer>w1, ..., w{self.dim}</answer>. The direction of the "
            f"weights is scored (cosine similarity above {self.threshold:g}).",
            "Items:",
        ]
        for i, x in enumerate(self.items, 1):
            lines.append(f"Item {i}: ({format_vector(x)})")
        return "\n".join(lines)

    # ---- hooks -------------------------------------------------------------------------------
    def _invalid(self, query: str, why: str) -> tuple[str, dict[str, Any]]:
        return f"Invalid query {query!r}: {why}", {
            "valid": False,
            "compared": None,
            "reply": None,
            "preferred": None,
            "estimate": list(self.estimate) if self.estimate else None,
            "estimate_reported": False,
            "estimate_updated": False,
            "similarity": self.progress(),
            "repeated_query": False,
            "action_is_effective": False,
        }

    def _parse_ids(self, pair: tuple[int, int] | None) -> tuple[int, int] | str:
        if pair is None:
            return "expected a pairwise question 'Would you prefer item A over item B?'"
        a, b = pair
        n = len(self.items)
        if not (1 <= a <= n and 1 <= b <= n):
            return f"item ids must be between 1 and {n}"
        if a == b:
            return "compare two different items"
        return a - 1, b - 1

    def _interact(self, query: str) -> tuple[str, dict[str, Any]]:
        body, est_text = split_estimate(query)
        est = None
        if est_text is not None:
            est = parse_vector(est_text, self.dim)
            if est is None:
                return self._invalid(query, f"the estimate must be {self.dim} numbers.")
        ids = None
        if body:
            parsed = self._parse_ids(parse_pair(body))
            if isinstance(parsed, str):
                return self._invalid(query, parsed + ", e.g. 'Would you prefer item 1 over item 2? estimate: ...'.")
            ids = parsed
        elif est is None:
            return self._invalid(
                query, "expected 'Would you prefer item A over item B?' and/or 'estimate: w1, ..., wd'."
            )
        if est is not None:
            self.estimate = est
        compared = preferred = reply = None
        repeated = False
        observed = False
        if ids is not None:
            a, b = ids
            ua, ub = dot(self.preference, self.items[a]), dot(self.preference, self.items[b])
            reply, order, repeated, observed = ask_pair(self.asked, self.comparisons, a, b, ua, ub)
            compared = (a + 1, b + 1)
            if order is None:
                text = f"Equal: the user likes items {a + 1} and {b + 1} the same."
            else:
                w, l = order
                preferred = w + 1
                text = f"{reply}: the user prefers item {w + 1} over item {l + 1}."
        else:
            text = "Estimate recorded."
        if self.estimate_source == "observations":
            updated = observed
        else:
            updated = est is not None
        return text, {
            "valid": True,
            "compared": compared,
            "reply": reply,
            "preferred": preferred,
            "estimate": list(self.estimate) if self.estimate else None,
            "estimate_reported": est is not None,
            "estimate_updated": updated,
            "similarity": self.progress(),
            "repeated_query": repeated,
            "action_is_effective": (ids is not None and not repeated) or est is not None,
        }

    def _answer(self, text: str) -> tuple[float, dict[str, Any]]:
        est = parse_vector(text, self.dim)
        if est is None:
            return 0.0, {
                "valid": False,
                "estimate": None,
                "similarity": 0.0,
                "success": False,
                "feedback": f"Invalid answer {text!r}: expected {self.dim} numbers. Reward 0.",
            }
        self.estimate = est
        sim = cosine(est, self.preference)
        ok = sim > self.threshold
        fb = f"Cosine similarity {sim:.2f}: " + ("success." if ok else "not close enough.")
        return float(ok), {"valid": True, "estimate": est, "similarity": sim, "success": ok, "feedback": fb}

    # ---- demonstrator ------------------------------------------------------------------------
    def posterior(self) -> PreferencePosterior:
        """The demonstrator's belief, conditioned on every comparison so far."""
        if self._posterior is None:
            self._posterior = PreferencePosterior(
                self.items, self._oracle_particles, seed=self._oracle_seed, nonnegative=self.nonnegative
            )
            self._posterior_seen = 0
        while self._posterior_seen < len(self.comparisons):
            self._posterior.observe(*self.comparisons[self._posterior_seen])
            self._posterior_seen += 1
        return self._posterior

    def _oracle_pair(self) -> tuple[int, int] | None:
        n = len(self.items)
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if frozenset((a, b)) not in self.asked]
        return self.posterior().best_pair(pairs) if pairs else None

    def oracle_action(self) -> str:
        post = self.posterior()
        mean = post.mean()
        pair = self._oracle_pair()
        if self.turns_left <= 1 or pair is None:
            return self.ANSWER_PREFIX + format_vector(mean or [1.0] * self.dim)
        query = f"Would you prefer item {pair[0] + 1} over item {pair[1] + 1}?"
        if self.comparisons and mean is not None:
            query += f" estimate: {format_vector(mean)}"
        return self.INTERACT_PREFIX + query

    def explain(self, action: str) -> str:
        kind, payload = self.split_action(action)
        t = len(self.comparisons)
        if kind == "answer":
            return (
                f"I have used my comparison budget after {t} comparisons, so I report the weights "
                f"that agree best with every answer: {payload}."
            )
        if kind == "interact":
            body, _ = split_estimate(payload)
            ids = self._parse_ids(parse_pair(body))
            if isinstance(ids, str):
                return f"I ask {payload}."
            a, b = ids
            post = self.posterior()
            wins = post.split(a, b)
            total = len(post.particles)
            if t == 0:
                return (
                    f"I know nothing yet. Items {a + 1} and {b + 1} differ in a direction that "
                    f"splits the plausible weight vectors {wins} to {total - wins}."
                )
            return (
                f"After {t} comparison{'s' if t != 1 else ''}, the weights that fit all answers "
                f"split {wins} to "
                f"{total - wins} on items {a + 1} versus {b + 1}, so this comparison is the most "
                "informative; my estimate is their average."
            )
        return super().explain(action)

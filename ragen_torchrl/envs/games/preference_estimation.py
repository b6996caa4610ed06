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

The question protocol (parsing and answering) is in
:mod:`~ragen_torchrl.envs.games.preference_questions`, the vectors and the belief in
:mod:`~ragen_torchrl.envs.games.preference_belief` and the part shared with MovieRecommendation in
:mod:`~ragen_torchrl.envs.games.preference_game`.

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

import random
from typing import Any, Sequence

from ragen_torchrl.envs.games.preference_belief import (
    cosine,
    dot,
    norm,
    random_unit,
)
from ragen_torchrl.envs.games.preference_game import PreferenceQuestionGame
from ragen_torchrl.envs.games.preference_questions import (
    ask_pair,
    format_vector,
    parse_pair,
    parse_vector,
    split_estimate,
)

__all__ = [
    "PreferenceEstimationGame",
]

Vector = list[float]


class PreferenceEstimationGame(PreferenceQuestionGame):
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
        self._init_questions(estimate_source, oracle_particles, oracle_seed)
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

    # ---- the compared items ------------------------------------------------------------------
    def _compared_items(self) -> list[list[float]]:
        return self.items

    def _prior_nonnegative(self) -> bool:
        return self.nonnegative

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
        return f"Invalid query {query!r}: {why}", self._info(False)

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
        body, est, error = self._split_query(query)
        if error is not None:
            return self._invalid(query, error)
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
        return text, self._info(
            True,
            compared=compared,
            reply=reply,
            preferred=preferred,
            estimate_reported=est is not None,
            estimate_updated=updated,
            repeated_query=repeated,
            action_is_effective=(ids is not None and not repeated) or est is not None,
        )

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

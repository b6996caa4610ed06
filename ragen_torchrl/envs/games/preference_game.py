"""What the two pairwise-question games share: the question log, the estimate and the demonstrator.

:class:`PreferenceEstimationGame <ragen_torchrl.envs.games.preference_estimation.PreferenceEstimationGame>`
and :class:`MovieRecommendationGame <ragen_torchrl.envs.games.movie_recommendation.MovieRecommendationGame>`
both ask "Would you prefer A over B?" about a list of compared items, keep the agent's running
estimate ``v̂_t`` (``estimate_source="agent"``) or derive it from the comparisons
(``"observations"``), score ``progress()`` as ``cos(v̂_t, v*)`` and let a particle belief
(:class:`~ragen_torchrl.envs.games.preference_belief.PreferencePosterior`) pick the question that
splits it most evenly. :class:`PreferenceQuestionGame` holds that common part; a subclass says
which items the questions compare (:meth:`PreferenceQuestionGame._compared_items`).

Example:
    >>> from ragen_torchrl.envs.games.preference_estimation import PreferenceEstimationGame
    >>> game = PreferenceEstimationGame([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], [0.8, 0.6])
    >>> isinstance(game, PreferenceQuestionGame), game._untried_pairs()
    (True, [(0, 1), (0, 2), (1, 2)])
"""

from __future__ import annotations

from typing import Any

from ragen_torchrl.checks import check_choice
from ragen_torchrl.envs.games.interactive import InteractiveGame
from ragen_torchrl.envs.games.preference_belief import PreferencePosterior, comparison_estimate, cosine
from ragen_torchrl.envs.games.preference_questions import parse_vector, split_estimate

__all__ = ["PreferenceQuestionGame"]

Vector = list[float]


class PreferenceQuestionGame(InteractiveGame):
    """Base of the games that ask pairwise preference questions (see module docstring).

    Subclasses call :meth:`_init_questions` in their constructor and implement
    :meth:`compared_items`; positions in ``comparisons`` / ``asked`` are 0-based indices into it.
    """

    ESTIMATE_SOURCES = ("agent", "observations")

    def _init_questions(self, estimate_source: str, oracle_particles: int, oracle_seed: int | str) -> None:
        """Check ``estimate_source`` and start an empty question log and belief."""
        check_choice("estimate_source", estimate_source, self.ESTIMATE_SOURCES)
        self.estimate_source = estimate_source
        self.estimate: Vector | None = None
        self.comparisons: list[tuple[int, int]] = []  # (winner, loser), 0-based positions
        self.asked: set[frozenset[int]] = set()
        self._oracle_particles = int(oracle_particles)
        self._oracle_seed = oracle_seed
        self._posterior: PreferencePosterior | None = None
        self._posterior_seen = 0

    def _compared_items(self) -> list[list[float]]:
        """Attribute vectors of the items the questions are about, in question-id order."""
        raise NotImplementedError

    def _prior_nonnegative(self) -> bool:
        """Whether the demonstrator's prior knows ``v*`` is non-negative (default False)."""
        return False

    # ---- proxy -------------------------------------------------------------------------------
    def current_estimate(self) -> Vector | None:
        """``v̂_t``: the agent's latest estimate, or the closed-form comparison estimate."""
        if self.estimate_source == "observations":
            return comparison_estimate(self._compared_items(), self.comparisons)
        return self.estimate

    def progress(self) -> float:
        return float(cosine(self.current_estimate(), self.preference))

    # ---- queries -----------------------------------------------------------------------------
    def interact(self, query: str) -> tuple[str, dict[str, Any]]:
        """Ask one query (see :meth:`InteractiveGame.interact`). Besides the game's own keys the
        info carries the estimate written in the query whatever its question part, as the T3
        reference code reads it: ``query_estimate`` (the ``estimate:`` part when it is ``dim``
        numbers, even in a query that is invalid as a whole, e.g. about an unknown item; ``None``
        when missing or of the wrong length) and ``query_estimate_similarity`` (its cosine with
        ``v*``, or ``None``). The game itself ignores the estimate of an invalid query.

        Example:
            >>> from ragen_torchrl.envs.games.preference_estimation import PreferenceEstimationGame
            >>> game = PreferenceEstimationGame([[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0])
            >>> _, info = game.interact("Would you prefer item 9 over item 1? estimate: 1, 0")
            >>> info["valid"], info["estimate_reported"], info["query_estimate"], info["query_estimate_similarity"]
            (False, False, [1.0, 0.0], 1.0)
        """
        feedback, info = super().interact(query)
        _, est_text = split_estimate("" if query is None else str(query))
        est = parse_vector(est_text, self.dim) if est_text is not None else None
        info["query_estimate"] = est
        info["query_estimate_similarity"] = None if est is None else float(cosine(est, self.preference))
        return feedback, info

    def _info(self, valid: bool, **kw: Any) -> dict[str, Any]:
        """The info dict of a query: the defaults of an invalid one, updated with ``kw``."""
        info = {
            "valid": valid,
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
        info.update(kw)
        return info

    def _split_query(self, query: str) -> tuple[str, Vector | None, str | None]:
        """``(question part, reported estimate or None, error or None)`` of a query; the error
        (an estimate of the wrong length) completes ``"Invalid query '...': "``."""
        body, est_text = split_estimate(query)
        est = None
        if est_text is not None:
            est = parse_vector(est_text, self.dim)
            if est is None:
                return body, None, f"the estimate must be {self.dim} numbers."
        return body, est, None

    # ---- demonstrator ------------------------------------------------------------------------
    def posterior(self) -> PreferencePosterior:
        """The demonstrator's belief over ``v*``, conditioned on every comparison so far."""
        if self._posterior is None:
            self._posterior = PreferencePosterior(
                self._compared_items(),
                self._oracle_particles,
                seed=self._oracle_seed,
                nonnegative=self._prior_nonnegative(),
            )
            self._posterior_seen = 0
        while self._posterior_seen < len(self.comparisons):
            self._posterior.observe(*self.comparisons[self._posterior_seen])
            self._posterior_seen += 1
        return self._posterior

    def _untried_pairs(self) -> list[tuple[int, int]]:
        """Pairs ``(a, b)``, ``a < b`` (0-based), not asked yet."""
        n = len(self._compared_items())
        return [(a, b) for a in range(n) for b in range(a + 1, n) if frozenset((a, b)) not in self.asked]

    def _oracle_pair(self) -> tuple[int, int] | None:
        pairs = self._untried_pairs()
        return self.posterior().best_pair(pairs) if pairs else None

"""The five T3 active-reasoning tasks as chat environments (RAGEN-2, arXiv 2604.06268).

GuessNumbers, CircuitDecoding, PreferenceEstimation, MovieRecommendation and SituationPuzzles:
each is an :class:`~ragen_torchrl.envs.active.env.ActiveReasoningEnv` over its game core
(:mod:`ragen_torchrl.envs.games`), with the paper's turn budget as default ``max_turn`` and a
task-specific uninformative query for noisy demonstrations (:meth:`random_query`). Level
``level_seed`` comes from the seed's split (:func:`split_level_factory`).

Example:
    >>> env = SituationPuzzlesEnv(num_envs=2)
    >>> env.task_name, env.max_turn
    ('SituationPuzzles', 15)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ragen_torchrl.checks import check_choice

from ..games.circuit_decoding import CircuitDecodingGame
from ..games.guess_numbers import GuessNumbersGame
from ..games.interactive import InteractiveGame
from ..games.movie_recommendation import MovieRecommendationGame
from ..games.preference_estimation import PreferenceEstimationGame
from ..games.situation_puzzles import PUZZLES, SituationPuzzlesGame
from ..splits import level_split
from .env import ActiveReasoningEnv

__all__ = [
    "CircuitDecodingEnv",
    "GuessNumbersEnv",
    "MovieRecommendationEnv",
    "PreferenceEstimationEnv",
    "SituationPuzzlesEnv",
    "random_pair_question",
    "split_level_factory",
]


def split_level_factory(
    generate: Callable[..., InteractiveGame], **settings: Any
) -> Callable[[int, int], InteractiveGame]:
    """A ``game_factory(level_seed, sample_seed)`` that draws level ``level_seed`` of the seed's
    split (:func:`~ragen_torchrl.envs.splits.level_split`): ``generate(level_seed, split, **settings)``.
    The T3 games are deterministic given the level, so the sample seed is unused.

    Example:
        >>> factory = split_level_factory(GuessNumbersGame.generate, num_digits=3, num_symbols=6)
        >>> factory(0, 0).hypothesis_size
        120
    """

    def factory(level_seed: int, sample: int) -> InteractiveGame:
        return generate(level_seed, level_split(level_seed), **settings)

    return factory


def random_pair_question(game: InteractiveGame, rng: random.Random, num_items: int, template: str) -> str:
    """A pairwise question about two distinct random ids in ``1..num_items`` (``template`` with
    ``{a}`` and ``{b}``), carrying the game's current estimate when it has one (as the oracle's
    questions do): the noisy query of the preference tasks.

    Example:
        >>> from ragen_torchrl.envs.games.preference_estimation import PreferenceEstimationGame
        >>> game = PreferenceEstimationGame([[1.0, 0.0], [0.0, 1.0]], [0.8, 0.6])
        >>> random_pair_question(game, random.Random(0), 2, "Would you prefer item {a} over item {b}?")
        'Would you prefer item 2 over item 1?'
    """
    a, b = rng.sample(range(1, num_items + 1), 2)
    query = template.format(a=a, b=b)
    if game.estimate is not None:  # keep reporting the current estimate, as the oracle does
        query += " estimate: " + ", ".join(f"{x:.2f}" for x in game.estimate)
    return query


class GuessNumbersEnv(ActiveReasoningEnv):
    """GuessNumbers: find a code of distinct digits from (in place, misplaced) feedback; reward = exact match.

    Args:
        num_digits, num_symbols: code length and alphabet, digits ``0 .. num_symbols-1``
            (default 4 of 10, the paper's 5040 codes; the ``guess_numbers_small`` preset uses
            3 of 6, 120 codes).
        terse, list_candidates: shorter demonstrator reasoning that lists the candidates once at
            most ``list_candidates`` are left (:class:`GuessNumbersGame`).
        split_by: ``"secret"`` (default: validation secrets are never training secrets) or
            ``"level"`` (both splits draw from every code; for tiny code spaces), see
            :meth:`GuessNumbersGame.generate`.
        Other arguments: :class:`ActiveReasoningEnv`.

    Example:
        >>> env = GuessNumbersEnv(num_envs=2)
        >>> env.max_turn, env.task_name
        (10, 'GuessNumbers')
        >>> GuessNumbersEnv(num_digits=3, num_symbols=6).game_factory(0, 0).hypothesis_size
        120
    """

    task_name = "GuessNumbers"
    #: random guesses tried when looking for one that leaves ``H`` unchanged (a noisy demonstration)
    STALL_TRIES = 32

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = GuessNumbersGame.max_turns,
        num_digits: int = 4,
        num_symbols: int = 10,
        terse: bool = False,
        list_candidates: int | None = None,
        split_by: str = "secret",
        **kwargs: Any,
    ) -> None:
        from ..games.guess_numbers import _check_size

        self.num_digits, self.num_symbols = _check_size(num_digits, num_symbols)
        self.terse = bool(terse)
        check_choice("split_by", split_by, GuessNumbersGame.SPLIT_BY)

        factory = split_level_factory(
            GuessNumbersGame.generate,
            num_digits=self.num_digits,
            num_symbols=self.num_symbols,
            split_by=split_by,
            terse=self.terse,
            list_candidates=list_candidates,
            max_turns=max_turn,
        )
        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        """A guess that makes no progress (leaves ``H`` unchanged: a belief-trap query) when one of
        :attr:`STALL_TRIES` random guesses does, else the last random guess."""
        from ..games.guess_numbers import _fb

        digits = "0123456789"[: game.num_symbols]
        hyps = game.hypotheses
        guess = ""
        for _ in range(self.STALL_TRIES):
            guess = "".join(rng.sample(digits, game.num_digits))
            if hyps:
                first = _fb(hyps[0], guess)
                if all(_fb(h, guess) == first for h in hyps):  # stops at the first split
                    return guess
        return guess

    def demo_action(self, game: InteractiveGame, rng: random.Random, off_oracle: bool) -> str:
        # The game's minimax oracle is cached along its own decision tree; after a noisy query the
        # history is new and every minimax decision costs ~0.1 s (minutes for an SFT data set).
        # Off the tree, a random guess consistent with all feedback (inside H, so |H| shrinks) is
        # ~50x cheaper and still finishes well within the budget.
        hyps = game.hypotheses
        if off_oracle and len(hyps) > 1 and game.turns_left > 1:
            return game.INTERACT_PREFIX + rng.choice(hyps)
        return game.oracle_action()


class CircuitDecodingEnv(ActiveReasoningEnv):
    """CircuitDecoding: identify hidden Boolean circuits by querying them; reward = fraction identified.

    Args:
        num_circuits, n_inputs, family, split_by: instance generator settings
            (:meth:`CircuitDecodingGame.generate`).
        terse: shorter demonstrator reasoning that carries each circuit's known truth-table cells
            (:meth:`CircuitDecodingGame.known_table`).
        presentation: ``"indexed"`` (default, the reference: the candidate formulas are listed
            with indices and the answer gives an index per circuit) or ``"formula"`` (the family
            described in words, formula-text answers); same rules and rewards.

    Example:
        >>> CircuitDecodingEnv(num_envs=1, num_circuits=1).max_turn
        10
    """

    task_name = "CircuitDecoding"

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = CircuitDecodingGame.max_turns,
        num_circuits: int = 2,
        n_inputs: int = 3,
        family: str = "default",
        terse: bool = False,
        split_by: str = "circuits",
        presentation: str = "indexed",
        **kwargs: Any,
    ) -> None:
        self.num_circuits, self.n_inputs, self.family = int(num_circuits), int(n_inputs), family
        self.terse = bool(terse)
        check_choice("split_by", split_by, CircuitDecodingGame.SPLIT_BY)
        self.presentation = check_choice("presentation", presentation, CircuitDecodingGame.PRESENTATIONS)

        factory = split_level_factory(
            CircuitDecodingGame.generate,
            num_circuits=num_circuits,
            n_inputs=n_inputs,
            family=family,
            split_by=split_by,
            max_turns=max_turn,
            terse=self.terse,
            presentation=self.presentation,
        )
        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    #: random queries tried when looking for one that splits nothing (a noisy demonstration)
    STALL_TRIES = 32

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        """A query that makes no progress (its circuit's candidates all give the same bit: a
        belief-trap query) when one of :attr:`STALL_TRIES` random queries does, else the last one."""
        query = ""
        for _ in range(self.STALL_TRIES):
            i = rng.randrange(len(game.names))
            k = rng.randrange(len(game.assignments))
            query = f"{game.names[i]}(" + ",".join(map(str, game.assignments[k])) + ")"  # one circuit per query
            if len({(t >> k) & 1 for t in game.alive[i]}) <= 1:
                return query
        return query


class PreferenceEstimationEnv(ActiveReasoningEnv):
    """PreferenceEstimation: estimate a hidden preference vector from pairwise questions
    ("Would you prefer item A over item B?" -> Yes / Equal / No); reward 1 iff
    ``cos(v̂, v*) > threshold``.

    Args:
        num_items, dim: instance size (20 items, 8 dimensions as the reference);
        nonnegative: ``v*`` has non-negative weights (default True, the reference);
        threshold: success cosine (0.88);
        estimate_source: ``"agent"`` (progress from the estimates the model reports, the paper's
            proxy) or ``"observations"`` (closed-form estimate from the comparisons).

    Example:
        >>> PreferenceEstimationEnv(num_envs=1).max_turn
        10
    """

    task_name = "PreferenceEstimation"

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = PreferenceEstimationGame.max_turns,
        num_items: int = 20,
        dim: int = 8,
        nonnegative: bool = True,
        threshold: float = 0.88,
        estimate_source: str = "agent",
        oracle_particles: int = 500,
        **kwargs: Any,
    ) -> None:
        self.num_items, self.dim = int(num_items), int(dim)

        factory = split_level_factory(
            PreferenceEstimationGame.generate,
            num_items=num_items,
            dim=dim,
            nonnegative=nonnegative,
            threshold=threshold,
            estimate_source=estimate_source,
            oracle_particles=oracle_particles,
            max_turns=max_turn,
        )
        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        return random_pair_question(game, rng, len(game.items), "Would you prefer item {a} over item {b}?")


class MovieRecommendationEnv(ActiveReasoningEnv):
    """MovieRecommendation: pairwise questions about seen movies ("Would you prefer 3 over 5?" ->
    Yes / Equal / No), then recommend the best unseen one; reward = exact match.

    Args:
        num_seen, num_candidates: movies listed per episode; estimate_source: as
            PreferenceEstimation; catalog_path: optional user catalog
            (:func:`~ragen_torchrl.envs.games.movie_recommendation.load_catalog`).

    Example:
        >>> MovieRecommendationEnv(num_envs=1).max_turn
        5
    """

    task_name = "MovieRecommendation"

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = MovieRecommendationGame.max_turns,
        num_seen: int = 8,
        num_candidates: int = 8,
        estimate_source: str = "agent",
        catalog_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        from ..games.movie_recommendation import generate_catalog, load_catalog

        catalog = load_catalog(catalog_path) if catalog_path else generate_catalog(0)

        factory = split_level_factory(
            MovieRecommendationGame.generate,
            catalog=catalog,
            num_seen=num_seen,
            num_candidates=num_candidates,
            estimate_source=estimate_source,
            max_turns=max_turn,
        )
        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        return random_pair_question(game, rng, len(game.seen), "Would you prefer {a} over {b}?")


class SituationPuzzlesEnv(ActiveReasoningEnv):
    """SituationPuzzles: yes/no questions to a judge, then an explanation; reward = word F1.

    Args:
        judge: a :class:`~ragen_torchrl.envs.games.situation_puzzles.Judge` (default: the
            rule-based judge over each puzzle's facts); success_threshold: F1 counted as success.

    Example:
        >>> SituationPuzzlesEnv(num_envs=1).max_turn
        15
    """

    task_name = "SituationPuzzles"

    def __init__(
        self,
        *,
        num_envs: int = 1,
        max_turn: int = SituationPuzzlesGame.max_turns,
        judge: Any = None,
        success_threshold: float = 0.5,
        **kwargs: Any,
    ) -> None:
        factory = split_level_factory(
            SituationPuzzlesGame.generate, judge=judge, success_threshold=success_threshold, max_turns=max_turn
        )
        super().__init__(factory, num_envs=num_envs, max_turn=max_turn, **kwargs)

    def random_query(self, game: InteractiveGame, rng: random.Random) -> str:
        # a question about another puzzle: usually off-topic, so the judge says Unknown
        puzzle = rng.choice(PUZZLES)
        return rng.choice(puzzle.facts).question if puzzle.facts else "Is it raining?"

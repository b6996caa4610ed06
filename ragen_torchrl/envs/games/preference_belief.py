"""Preference vectors and the demonstrator's belief over them (pure Python, no torch).

Vector helpers (:func:`dot`, :func:`norm`, :func:`normalize`, :func:`cosine`), uniform unit
vectors (:func:`random_unit`), the closed-form estimate from observed comparisons
(:func:`comparison_estimate`) and :class:`PreferencePosterior`, the particle belief over the
hidden preference vector that the PreferenceEstimation and MovieRecommendation demonstrators
query.

Example:
    >>> round(cosine([1.0, 0.0], [1.0, 1.0]), 4)
    0.7071
    >>> [round(x, 4) for x in comparison_estimate([[1.0, 0.0], [0.0, 1.0]], [(0, 1)])]
    [0.7071, -0.7071]
"""

from __future__ import annotations

import math
import random
from typing import Sequence

__all__ = [
    "PreferencePosterior",
    "comparison_estimate",
    "cosine",
    "dot",
    "norm",
    "normalize",
    "random_unit",
]

Vector = list[float]


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

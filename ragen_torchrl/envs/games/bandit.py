"""Two-armed bandit with symbolic arm names (pure Python, no torch).

One turn: the agent picks one of two named arms. The low-risk arm always pays 0.1; the
high-risk arm pays 1.0 with probability 0.25, else 0 (expected value 0.25), drawn from the
game's seeded RNG. Which name is the low- or high-risk arm, and in which order the two are
shown, is part of the level; the observation describes one arm as "steady" and the other
as "risky", so a policy can learn a preference. Validation levels use name pairs (and
names) disjoint from training.

Example:
    >>> game = BanditGame.generate(seed=0)
    >>> game.oracle_action() == game.high_risk_arm
    True
    >>> reward, done, info = game.step(game.low_risk_arm)
    >>> reward, done
    (0.1, True)
"""

from __future__ import annotations

import random
from typing import Any

from ragen_torchrl.envs.games.base import TextGame

__all__ = ["BanditGame", "TRAIN_NAME_PAIRS", "VAL_NAME_PAIRS", "LOW_RISK_REWARD", "HIGH_RISK_REWARD", "HIGH_RISK_PROB"]

LOW_RISK_REWARD = 0.1
HIGH_RISK_REWARD = 1.0
HIGH_RISK_PROB = 0.25

#: arm name pairs for training levels
TRAIN_NAME_PAIRS: tuple[tuple[str, str], ...] = (
    ("Teacher", "Engineer"),
    ("Dragon", "Phoenix"),
    ("Apple", "Banana"),
    ("River", "Mountain"),
    ("Lion", "Tiger"),
    ("Red", "Blue"),
    ("Sun", "Moon"),
    ("Doctor", "Pilot"),
    ("Coffee", "Tea"),
    ("North", "South"),
    ("Wolf", "Bear"),
    ("Gold", "Silver"),
    ("Rose", "Lily"),
    ("Piano", "Guitar"),
    ("Train", "Plane"),
    ("Ocean", "Desert"),
)

#: held-out arm name pairs for validation levels (no name is shared with training)
VAL_NAME_PAIRS: tuple[tuple[str, str], ...] = (
    ("Farmer", "Sailor"),
    ("Eagle", "Shark"),
    ("Lemon", "Cherry"),
    ("Forest", "Island"),
    ("Green", "Yellow"),
    ("Star", "Cloud"),
    ("Violin", "Drum"),
    ("East", "West"),
)

_SPLITS = {"train": TRAIN_NAME_PAIRS, "val": VAL_NAME_PAIRS}


class BanditGame(TextGame):
    """One two-armed bandit episode (a single choice).

    ``action_names`` is the per-level pair of arm names (in the order shown).
    ``info['success']`` is True when the chosen arm is the one with the higher expected
    value (the high-risk arm, 0.25 > 0.1), regardless of the random payout;
    ``info['action_is_effective']`` is True for any valid arm. ``progress()`` is 1.0 before
    the choice and 0.0 after.
    """

    instructions: str = (
        "You are playing a bandit game. There are two arms, each with a name. One arm is "
        "steady: it gives a small reward every time. The other arm is risky: it gives a "
        "big reward some of the time and nothing the rest of the time. You get one pull. "
        "Answer with the name of the arm you pull, and try to get the most reward on "
        "average."
    )

    def __init__(
        self,
        low_risk_arm: str,
        high_risk_arm: str,
        seed: int = 0,
        low_first: bool = True,
        payout_seed: int | None = None,
    ):
        """Explicit level: arm names, the level seed, the display order, and the seed of
        the payout RNG (``payout_seed``, default ``seed``; pass a per-sample seed to give
        the samples of one group independent payouts on the same level)."""
        low, high = str(low_risk_arm).strip(), str(high_risk_arm).strip()
        if not low or not high or low.lower() == high.lower():
            raise ValueError(f"bandit arms need two different non-empty names, got {low_risk_arm!r}, {high_risk_arm!r}")
        self.low_risk_arm = low
        self.high_risk_arm = high
        self.seed = int(seed)
        self.action_names: tuple[str, ...] = (low, high) if low_first else (high, low)
        self.payout_seed = self.seed if payout_seed is None else int(payout_seed)
        self._rng = random.Random(f"bandit-payout:{self.payout_seed}")
        self._done = False
        self._success = False
        self._choice: str | None = None
        self._reward: float | None = None

    @classmethod
    def generate(cls, seed: int, split: str = "train", payout_seed: int | None = None) -> "BanditGame":
        """A level from the ``split`` ("train" or "val") name pairs, deterministic in ``seed``:
        the pair, which name is risky, and the display order are drawn from the seed. The
        payouts come from ``payout_seed`` (default ``seed``)."""
        if split not in _SPLITS:
            raise ValueError(f"bandit split must be 'train' or 'val', got {split!r}")
        rng = random.Random(f"bandit-level:{split}:{int(seed)}")
        a, b = rng.choice(_SPLITS[split])
        if rng.random() < 0.5:
            a, b = b, a
        return cls(low_risk_arm=a, high_risk_arm=b, seed=seed, low_first=rng.random() < 0.5, payout_seed=payout_seed)

    # ---------------------------------------------------------------- dynamics
    def _canonical(self, action: str) -> str:
        key = str(action).strip().lower()
        for name in self.action_names:
            if name.lower() == key:
                return name
        raise ValueError(f"unknown bandit arm {action!r}; expected one of {self.action_names}")

    def pull(self, arm: str) -> float:
        """Draw one payout of ``arm`` from the game's RNG (no episode bookkeeping)."""
        arm = self._canonical(arm)
        if arm == self.low_risk_arm:
            return LOW_RISK_REWARD
        return HIGH_RISK_REWARD if self._rng.random() < HIGH_RISK_PROB else 0.0

    def step(self, action: str) -> tuple[float, bool, dict[str, Any]]:
        arm = self._canonical(action)
        if self._done:
            return 0.0, True, {"success": self._success, "action_is_effective": False}
        reward = self.pull(arm)
        self._done = True
        self._choice = arm
        self._reward = reward
        self._success = arm == self.high_risk_arm
        return reward, True, {"success": self._success, "action_is_effective": True}

    @property
    def done(self) -> bool:
        return self._done

    def expected_value(self, arm: str) -> float:
        arm = self._canonical(arm)
        return LOW_RISK_REWARD if arm == self.low_risk_arm else HIGH_RISK_REWARD * HIGH_RISK_PROB

    def oracle_action(self) -> str:
        """The arm with the higher expected value (the high-risk arm: 0.25 > 0.1)."""
        return max(self.action_names, key=self.expected_value)

    def progress(self) -> float:
        return 0.0 if self._done else 1.0

    # ---------------------------------------------------------------- text
    def _describe(self, arm: str) -> str:
        if arm == self.low_risk_arm:
            return f"{arm} is steady: it gives a small reward every time."
        return f"{arm} is risky: it gives a big reward some of the time and nothing the rest of the time."

    def render_text(self) -> str:
        a, b = self.action_names
        text = f"You have two arms: {a} and {b}. {self._describe(a)} {self._describe(b)} Which arm do you pull?"
        if self._done:
            text += f" You pulled {self._choice} and got {self._reward:g}."
        return text

    def explain(self, action: str) -> str:
        arm = self._canonical(action)
        other = self.action_names[1] if arm == self.action_names[0] else self.action_names[0]
        if arm == self.high_risk_arm:
            return (
                f"{arm} is risky and {other} is steady. The big reward of {arm} comes often "
                f"enough that on average it gives more than {other}, so I pull {arm}."
            )
        return f"{arm} is steady and {other} is risky. I want a sure reward, so I pull {arm}."

    def __repr__(self) -> str:
        return f"BanditGame(low={self.low_risk_arm!r}, high={self.high_risk_arm!r}, seed={self.seed})"

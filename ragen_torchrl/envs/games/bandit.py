"""Two-armed bandit whose arm names carry the meaning (pure Python, no torch).

One turn: the agent picks one of two named arms. The low-risk arm always pays 0.1; the
high-risk arm pays 1.0 with probability 0.25, else 0 (expected value 0.25), drawn from the
game's seeded RNG. As in the RAGEN reference bandit, the names are the only hint: each
pair is a steady occupation and a risky one (``Teacher`` vs ``Trader``), and neither the
instructions nor the observation say which arm is which, so the agent must infer the risk
from what the names mean. A level draws a pair and the display order; validation levels
use held-out pairs (no name is shared with training), testing that the agent reads the
names rather than memorising them. Success (as in the reference) is pulling the
high-risk arm, the one with the higher expected reward (0.25 > 0.1).

Example:
    >>> game = BanditGame.generate(seed=0)
    >>> game.oracle_action() == game.high_risk_arm
    True
    >>> "risky" in game.render_text() or "steady" in game.render_text()  # never said
    False
    >>> reward, done, info = game.step(game.low_risk_arm)
    >>> reward, done, info["success"]
    (0.1, True, False)
"""

from __future__ import annotations

import random
from typing import Any

from ragen_torchrl.envs.games.base import TextGame

__all__ = ["BanditGame", "TRAIN_NAME_PAIRS", "VAL_NAME_PAIRS", "LOW_RISK_REWARD", "HIGH_RISK_REWARD", "HIGH_RISK_PROB"]

LOW_RISK_REWARD = 0.1
HIGH_RISK_REWARD = 1.0
HIGH_RISK_PROB = 0.25

#: (low-risk, high-risk) name pairs of training levels: a steady occupation against one
#: with rare big wins
TRAIN_NAME_PAIRS: tuple[tuple[str, str], ...] = (
    ("Teacher", "Trader"),
    ("Librarian", "Gambler"),
    ("Accountant", "Speculator"),
    ("Nurse", "StartupFounder"),
    ("Clerk", "Stuntman"),
    ("Postman", "Prospector"),
    ("Banker", "VentureCapitalist"),
    ("Pharmacist", "PokerPlayer"),
    ("Gardener", "TreasureHunter"),
    ("Plumber", "Cryptominer"),
    ("Dentist", "DayTrader"),
    ("Electrician", "RaceDriver"),
)

#: held-out (low-risk, high-risk) pairs of validation levels (no name is shared with training)
VAL_NAME_PAIRS: tuple[tuple[str, str], ...] = (
    ("Receptionist", "Explorer"),
    ("Bookkeeper", "Entrepreneur"),
    ("Cashier", "Influencer"),
    ("Mechanic", "Adventurer"),
    ("Secretary", "Bettor"),
    ("Archivist", "Stockpicker"),
    ("Auditor", "Wildcatter"),
    ("Baker", "Filmmaker"),
)

_SPLITS = {"train": TRAIN_NAME_PAIRS, "val": VAL_NAME_PAIRS}


class BanditGame(TextGame):
    """One two-armed bandit episode (a single choice).

    ``action_names`` is the per-level pair of arm names (in the order shown).
    ``info['success']`` is True when the chosen arm is the one with the higher expected
    value (the high-risk arm, 0.25 > 0.1, as the reference's ``success``), regardless of
    the random payout;
    ``info['action_is_effective']`` is True for any valid arm. ``progress()`` is 1.0 before
    the choice and 0.0 after.
    """

    # says neither which arm is risky nor what either pays: the names are the only hint
    instructions: str = (
        "You are playing a bandit game. There are two arms, each named after a job. Each "
        "arm pays rewards in its own way, related to the meaning of its name. You get one "
        "pull. Think about what each name suggests, then answer with the name of the arm "
        "that gives more reward on average."
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
        the pair and the display order are drawn from the seed; which name is risky is
        fixed by the pair (the names carry the meaning). The payouts come from
        ``payout_seed`` (default ``seed``).

        Example:
            >>> g = BanditGame.generate(5, split="val")
            >>> (g.low_risk_arm, g.high_risk_arm) in VAL_NAME_PAIRS
            True
        """
        if split not in _SPLITS:
            raise ValueError(f"bandit split must be 'train' or 'val', got {split!r}")
        rng = random.Random(f"bandit-level:{split}:{int(seed)}")
        low, high = rng.choice(_SPLITS[split])
        low_first = rng.random() < 0.5
        return cls(low_risk_arm=low, high_risk_arm=high, seed=seed, low_first=low_first, payout_seed=payout_seed)

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
    def render_text(self) -> str:
        a, b = self.action_names
        text = f"The arms are {a} and {b}. Which arm do you pull?"
        if self._done:
            text += f" You pulled {self._choice} and got {self._reward:g}."
        return text

    def explain(self, action: str) -> str:
        arm = self._canonical(action)
        other = self.action_names[1] if arm == self.action_names[0] else self.action_names[0]
        # the demonstrator knows the roles; its reasoning reads them off the names' meaning
        if arm == self.high_risk_arm:
            return (
                f"{arm} sounds risky: big wins, but not always. {other} sounds steady: a small "
                f"sure amount. The big wins make {arm} pay more on average, so I pull {arm}."
            )
        return (
            f"{arm} sounds steady: a small sure amount. {other} sounds risky: big wins, but not "
            f"always. I want a sure reward, so I pull {arm}."
        )

    def __repr__(self) -> str:
        return f"BanditGame(low={self.low_risk_arm!r}, high={self.high_risk_arm!r}, seed={self.seed})"

"""Which arm GRPO's and Dr.GRPO's advantages push toward on the two-armed bandit, computed exactly.

A group of G samples of one prompt; each picks the risky arm with probability q (a softmax over two
arms). The steady arm pays 0.1; the risky arm pays 1.0 with probability 0.25 (expected value 0.25, the
better arm). Under ``env.payout_seeding=level`` (the reference's) the group's risky samples share one
payout draw; under ``sample`` each draws its own. The expected policy gradient on the risky arm's logit
is E[sum_i A_i (1[risky_i] - q)]: positive pushes toward the risky arm. GRPO standardises the rewards
within the group (A = (r - mean) / (std + eps)); Dr.GRPO only centres them (A = r - mean).

    python docs/results/smollm2_bandit_preset/bandit_gradient.py
"""

from __future__ import annotations

import itertools
import math

STEADY, RISKY_WIN, P_WIN = 0.1, 1.0, 0.25


def risky_logit_signal(q: float, group: int = 4, *, std: bool = True, shared: bool = True, eps: float = 1e-6) -> float:
    """The expected gradient on the risky arm's logit (exact sum over arm choices and payout draws)."""
    if shared:
        draws = [([RISKY_WIN] * group, P_WIN), ([0.0] * group, 1 - P_WIN)]
    else:
        draws = [
            (list(o), math.prod(P_WIN if x else 1 - P_WIN for x in o))
            for o in itertools.product([RISKY_WIN, 0.0], repeat=group)
        ]
    total = 0.0
    for arms in itertools.product([0, 1], repeat=group):  # 1 = risky
        p_arms = math.prod(q if a else 1 - q for a in arms)
        for payout, p_draw in draws:
            r = [payout[i] if a else STEADY for i, a in enumerate(arms)]
            mean = sum(r) / group
            sd = math.sqrt(sum((x - mean) ** 2 for x in r) / (group - 1))
            adv = [(x - mean) / (sd + eps) if std else x - mean for x in r]
            total += p_arms * p_draw * sum(adv[i] * (a - q) for i, a in enumerate(arms))
    return total


if __name__ == "__main__":
    for q in (0.1, 0.3, 0.5):
        cells = {
            f"{'GRPO' if std else 'Dr.GRPO'} / {'level' if shared else 'sample'}": round(
                risky_logit_signal(q, std=std, shared=shared), 4
            )
            for std in (True, False)
            for shared in (True, False)
        }
        print(f"q={q}", cells)

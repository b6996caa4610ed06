"""Demonstration conversations from an environment's own oracle.

Each demonstration is a chat (list of ``{"role", "content"}`` dicts) rendered exactly as
the environment renders its prompts, with assistant replies of the form
``<think>reason</think><answer>a1 || a2</answer>`` whose reasoning depends on the
observation (``TextGame.explain``). A fraction ``noise`` of the actions is replaced by a
non-optimal one: a uniformly random action (``noise_kind="uniform"``), or the game's biased
heuristic (``"heuristic"``: ``greedy_action``, e.g. walking straight at the goal and ignoring
holes) when it has one. Uniform noise keeps the oracle's action the most likely one and
leaves a flat policy that RL sharpens quickly; heuristic noise shifts the most likely action
in the states where the heuristic is wrong, which RL only fixes once the policy learns to
read those states (many more iterations on the tiny model; see the README).

Example:
    >>> from ragen_torchrl.envs import make_env
    >>> env = make_env("frozenlake", num_envs=1)
    >>> demos = make_demonstrations(env, num_episodes=2, noise=0.0, seed=0)
    >>> demos[0][0]["role"], demos[0][2]["role"]
    ('system', 'assistant')
    >>> demos[0][2]["content"].startswith("<think>")
    True
"""

from __future__ import annotations

import random

from ..envs.text_env import NOISE_KINDS, TextGameEnv, sample_seed


def make_demonstrations(
    env: TextGameEnv,
    num_episodes: int,
    *,
    noise: float = 0.3,
    noise_kind: str = "uniform",
    seed: int = 0,
    level_seed_offset: int = 1 << 31,
    progress: bool = False,
) -> list[list[dict[str, str]]]:
    """Roll out the oracle (with ``noise``) and return the conversations.

    Args:
        env: the environment (its game factory, system prompt and observation rendering
            are reused so demonstrations look exactly like training prompts).
        num_episodes: number of conversations.
        noise: probability that an action is replaced by a non-optimal one.
        noise_kind: ``"uniform"`` (a random action) or ``"heuristic"`` (the game's
            ``greedy_action`` when it has one); see :meth:`TextGameEnv.demo_turn`.
        seed: RNG seed (levels and noise).
        level_seed_offset: demonstration levels are drawn from
            ``[offset, offset + 2**30)``, disjoint from training and validation seeds.
        progress: show a progress bar (episodes/s, ETA) on stderr.
    """
    from tqdm.auto import tqdm

    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"sft.noise must be in [0, 1], got {noise}")
    if noise_kind not in NOISE_KINDS:
        raise ValueError(f"sft.noise_kind must be one of {NOISE_KINDS}, got {noise_kind!r}")
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    rng = random.Random(seed)
    conversations = []
    for _ in tqdm(range(num_episodes), desc="demonstrations", unit="episode", disable=not progress, mininterval=1.0):
        level = level_seed_offset + rng.randrange(1 << 30)
        game = env.game_factory(level, sample_seed(level, 0))
        chat = [
            {"role": "system", "content": env.system_prompt},
            {"role": "user", "content": env.observation_text(game)},
        ]
        actions_left = env.max_actions_per_traj
        for _turn in range(env.max_turn):
            reply, done, used = env.demo_turn(game, rng, noise, actions_left, noise_kind=noise_kind)
            actions_left -= used
            chat.append({"role": "assistant", "content": reply})
            if done or actions_left <= 0:
                break
            chat.append({"role": "user", "content": env.observation_text(game, env.feedback_prefix(game))})
        conversations.append(chat)
    return conversations


def tokenizer_corpus(env: TextGameEnv, num_episodes: int = 300, seed: int = 0) -> list[str]:
    """Text the tiny tokenizer is trained on: prompts, observations and replies."""
    # the chat template's own words, so "system"/"user"/"assistant" become single tokens
    corpus = ["system\nuser\nassistant\n"] * num_episodes + ["Invalid reply."]
    for chat in make_demonstrations(env, num_episodes, noise=0.5, seed=seed):
        corpus.extend(message["content"] for message in chat)
    return corpus

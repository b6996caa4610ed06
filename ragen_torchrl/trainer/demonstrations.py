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

``reasoning="shuffled"`` builds a warm start with template collapse on purpose (RAGEN-2,
arXiv 2604.06268): every reasoning text is swapped for the reasoning of another, randomly chosen
demonstration turn, while the action stays the (noisy) oracle's. The reasoning's marginal
distribution, and so its entropy, is exactly that of the grounded demonstrations, but it carries no
information about the input: the MI proxies should see the difference, entropy should not.

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

from ragen_torchrl.checks import check_choice

from ..envs.parsing import THINK_RE
from ..envs.text_env import NOISE_KINDS, TextGameEnv, sample_seed

#: ``grounded``: the oracle's reasoning about the observation; ``shuffled``: reasoning permuted
#: across all demonstration turns (input-independent, same marginal distribution)
REASONING_KINDS = ("grounded", "shuffled")


def shuffle_reasoning(conversations: list[list[dict[str, str]]], seed: int = 0) -> list[list[dict[str, str]]]:
    """Permute the ``<think>`` texts across every assistant turn of ``conversations``.

    The multiset of reasoning texts is unchanged (same entropy), the answers stay where they were,
    and which reasoning goes with which observation is random: the reasoning no longer depends on
    the input. Turns without a ``<think>`` block are left alone. Returns new conversations.

    Example:
        >>> demos = [[{"role": "assistant", "content": f"<think>r{i}</think><answer>a{i}</answer>"}] for i in range(4)]
        >>> out = shuffle_reasoning(demos, seed=1)
        >>> sorted(m[0]["content"][7:9] for m in out), [m[0]["content"][-11:-9] for m in out]
        (['r0', 'r1', 'r2', 'r3'], ['a0', 'a1', 'a2', 'a3'])
    """
    thinks = [
        m.group(1)
        for chat in conversations
        for msg in chat
        if msg["role"] == "assistant" and (m := THINK_RE.search(msg["content"]))
    ]
    random.Random(seed).shuffle(thinks)
    it = iter(thinks)
    out = []
    for chat in conversations:
        new_chat = []
        for msg in chat:
            if msg["role"] == "assistant" and (m := THINK_RE.search(msg["content"])):
                content = msg["content"][: m.start(1)] + next(it) + msg["content"][m.end(1) :]
                msg = {**msg, "content": content}
            new_chat.append(msg)
        out.append(new_chat)
    return out


def make_demonstrations(
    env: TextGameEnv,
    num_episodes: int,
    *,
    noise: float = 0.3,
    noise_kind: str = "uniform",
    seed: int = 0,
    level_seed_offset: int = 1 << 31,
    progress: bool = False,
    reasoning: str = "grounded",
    images: list | None = None,
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
        reasoning: ``"grounded"`` (the oracle's reasoning) or ``"shuffled"`` (reasoning permuted
            across all turns with :func:`shuffle_reasoning`: template collapse on purpose).
        images: a list to fill with each conversation's board images, one uint8 ``[3, H, W]`` per user
            message, in order (``env.render(game)`` of the state that message shows: visual envs,
            :mod:`ragen_torchrl.envs.visual`).

    Example (a visual env):
        >>> from ragen_torchrl.envs import make_env
        >>> shown = []
        >>> demos = make_demonstrations(make_env("frozenlake_visual", num_envs=1, tile_px=2), 3, images=shown)
        >>> [len(s) for s in shown] == [sum(m["role"] == "user" for m in d) for d in demos], tuple(shown[0][0].shape)
        (True, (3, 8, 8))
    """
    render = None
    if images is not None:
        render = getattr(env, "render", None)
        if not callable(render):
            raise ValueError(f"{type(env).__name__} renders no board images (a visual env does: env=*_visual)")
    from tqdm.auto import tqdm

    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"sft.noise must be in [0, 1], got {noise}")
    check_choice("sft.noise_kind", noise_kind, NOISE_KINDS)
    check_choice("sft.reasoning", reasoning, REASONING_KINDS)
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    rng = random.Random(seed)
    conversations = []
    for _ in tqdm(range(num_episodes), desc="demonstrations", unit="episode", disable=not progress, mininterval=1.0):
        chat, shown = _demo_episode(env, rng, noise, noise_kind, level_seed_offset, render)
        conversations.append(chat)
        if images is not None:
            images.append(shown)
    if reasoning == "shuffled":
        conversations = shuffle_reasoning(conversations, seed=seed + 1)
    return conversations


def _demo_episode(env, rng: random.Random, noise: float, noise_kind: str, level_seed_offset: int, render):
    """One oracle episode: its conversation, and the image of each user message's state when ``render``."""
    level = level_seed_offset + rng.randrange(1 << 30)
    game = env.game_factory(level, sample_seed(level, 0))
    chat = [
        {"role": "system", "content": env.system_prompt},
        {"role": "user", "content": env.observation_text(game)},
    ]
    shown = [render(game)] if render is not None else []
    actions_left = env.max_actions_per_traj
    for _turn in range(env.max_turn):
        reply, done, used = env.demo_turn(game, rng, noise, actions_left, noise_kind=noise_kind)
        actions_left -= used
        chat.append({"role": "assistant", "content": reply})
        if done or actions_left <= 0:
            break
        chat.append({"role": "user", "content": env.observation_text(game, env.feedback_prefix(game))})
        if render is not None:
            shown.append(render(game))
    return chat, shown


def tokenizer_corpus(env: TextGameEnv, num_episodes: int = 300, seed: int = 0) -> list[str]:
    """Text the tiny tokenizer is trained on: prompts, observations and replies."""
    # the chat template's own words, so "system"/"user"/"assistant" become single tokens
    corpus = ["system\nuser\nassistant\n"] * num_episodes + ["Invalid reply."]
    for chat in make_demonstrations(env, num_episodes, noise=0.5, seed=seed):
        corpus.extend(message["content"] for message in chat)
    return corpus

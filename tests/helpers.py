"""Constants and helpers shared by test files in several folders.

``pyproject.toml`` puts ``tests/`` on ``sys.path`` (``[tool.pytest.ini_options] pythonpath``),
so any test file imports these with ``from helpers import ...`` whatever its folder.
Fixtures stay in ``conftest.py``, which pytest loads for every folder below ``tests/``.
"""

from __future__ import annotations

#: ragen-train overrides for a seconds-long end-to-end run: a one-layer model warm-started for two
#: steps on four demonstrations, on the CPU, one thread, demonstrated replies longer than the test's
#: rollout.max_new_tokens allowed (tests add what they need on top)
TINY_RUN = [
    "sft.steps=2",
    "sft.episodes=4",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_layers=1",
    "model.vocab_size=300",
    "model.device=cpu",
    "model.threads=1",
    # a two-step warm start teaches nothing the short test replies could cut: warn, do not refuse
    "sft.reply_budget=warn",
]

#: one training iteration of a preset at its default batch shape, small validation set and model
SMALL = [
    "trainer.total_iterations=1",
    "trainer.val_levels=2",
    "trainer.log_text_samples=0",
    *TINY_RUN,
]

#: sizes of the session's tiny model (small enough that a forward pass takes milliseconds)
TINY_SIZES = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=4, num_kv_heads=2)


def load_tiny(path: str):
    """A fresh (model, tokenizer) from ``path`` on CPU/fp32, in eval mode."""
    from ragen_torchrl.models.loading import load_pretrained

    return load_pretrained(path, device="cpu", dtype="float32")


#: scripted conversations of the update-path tests (multi-turn and single-turn rows)
CHATS = [
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "P___\n_O__\n___G"},
        {"role": "assistant", "content": "<think>down</think><answer>Down</answer>"},
        {"role": "user", "content": "obs two"},
        {"role": "assistant", "content": "<answer>Right</answer>"},
    ],
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "obs"},
        {"role": "assistant", "content": "<think>x</think><answer>Up</answer>"},
    ],
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "G__P"},
        {"role": "assistant", "content": "<think>left left</think><answer>Left || Left</answer>"},
    ],
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "G_P_"},
        {"role": "assistant", "content": "<answer>Left</answer>"},
        {"role": "user", "content": "GP__"},
        {"role": "assistant", "content": "<think>one more</think><answer>Left</answer>"},
    ],
]


def records():
    """Four scripted FrozenLake conversations in two prompt groups, with returns (the update tests' batch)."""
    import torch
    from tensordict import TensorDict
    from torchrl.data.llm import History

    recs = TensorDict(
        group_id=torch.tensor([0, 0, 1, 1]),
        episode_return=torch.tensor([1.0, -0.5, 0.2, 0.9]),
        num_tokens=torch.tensor([20, 12, 15, 18]),
        batch_size=[4],
    ).to_lazystack(0)
    recs.set(("history", "full"), History.from_chats(CHATS))
    return recs


def algo_preset(name: str):
    """The ``algo`` node of ``algo=<name>`` as Hydra composes it (the preset on its base, ``grpo.yaml``)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR

    with initialize_config_dir(config_dir=str(PACKAGE_CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"algo={name}"])
    return OmegaConf.create(OmegaConf.to_container(cfg.algo, resolve=True))


def algo_objective(name: str, model, tok, actor, mini_batch_size: int, **overrides):
    """``(Algorithm, algo config)`` of the shipped ``configs/algo/<name>.yaml`` with a small mini-batch."""
    from ragen_torchrl.objectives import build_algorithm

    cfg = algo_preset(name)
    cfg.mini_batch_size = mini_batch_size
    for key, value in overrides.items():
        cfg[key] = value
    return build_algorithm(cfg, actor, model, tok), cfg


def grads(model) -> list:
    """A copy of every parameter's gradient (zeros where there is none)."""
    import torch

    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def random_qwen2(vocab_size: int, *, seed: int = 0, logit_scale: float = 20.0):
    """A one-layer random Qwen2 (pad 0, eos/bos 1) in eval mode whose LM head is scaled by ``logit_scale``:
    a random head gives a near-uniform softmax, a scaled one a few likely tokens and a long tail, where
    sampling at another temperature or from a truncated distribution shows in the counts."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    return model


class RecordingPolicy:
    """Wraps a rollout policy and records what it read and sampled at each turn, per env row:
    ``seen[env_index]`` is a list of ``(prompt ids, reply ids)``."""

    def __init__(self, policy) -> None:
        from collections import defaultdict

        self.policy, self.seen = policy, defaultdict(list)

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def __call__(self, td):
        from ragen_torchrl import keys as K

        out = self.policy(td)
        rows = out.get(K.ENV_INDEX).tolist()
        for i, p, r in zip(rows, out.get(K.TOKENS_PROMPT, as_list=True), out.get(K.TOKENS_RESPONSE, as_list=True)):
            self.seen[i].append((p.clone(), r.clone()))
        return out


def validation_change(summary: dict) -> tuple[dict, dict, float, float]:
    """A run summary's first and last validation, the change in success and its standard error
    (the two validations' standard errors combined as independent)."""
    import math

    a, b = summary["val_start"], summary["val_end"]
    return a, b, b["success"] - a["success"], math.hypot(a["success_stderr"], b["success_stderr"])


def reward_variance_at_start(run, until: int = 10) -> tuple[float, float]:
    """Mean zero-variance groups and mean in-group reward std over a run's iterations ``<= until``
    (``run``: a :func:`ragen_torchrl.reporting.runs.load_run` run)."""
    import statistics

    zero = [v for it, v in run.series("filter/zero_variance_groups") if it <= until]
    std = [v for it, v in run.series("filter/in_group_std_mean") if it <= until]
    return statistics.mean(zero), statistics.mean(std)


def success_windows(run, iterations: int, width: int = 10) -> str:
    """Training success averaged over consecutive windows of ``width`` iterations, as a page writes them."""
    import statistics

    success = run.series("rollout/success")
    means = (statistics.mean(v for it, v in success if lo < it <= lo + width) for lo in range(0, iterations, width))
    return ", ".join(f"{m:.3f}" for m in means)

"""Smoke test of ``benchmarks/vs_trl.py``'s pieces (ours vs TRL's GRPOTrainer), never of its timings.

Skipped when TRL (the ``bench`` extra) is not installed. Checks that both sides get the same
work: TRL's prompts and reward are the env's own, its config does one optimizer step per
generation batch (so it skips the separate log-prob pass), and that the instrumented
iteration and the TRL step timer produce every piece of the breakdown.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

from ragen_torchrl.envs import make_env  # noqa: E402
from ragen_torchrl.envs.messages import history_messages  # noqa: E402
from ragen_torchrl.keys import HISTORY_FULL, HISTORY_PROMPT, LEVEL_SEED, REWARD  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_layers=1",
    "model.vocab_size=300",
]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vs_trl", ROOT / "benchmarks" / "vs_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trainer(bench, tmp_path_factory):
    """P=2 x G=2, 4 new tokens, a one-layer random-init model."""
    cache = tmp_path_factory.mktemp("vs_trl_cache")
    overrides = bench.single_turn_overrides(2, 2, 4, 1, False) + TINY + [f"model.cache_dir={cache}"]
    tr = bench.build_trainer(overrides, str(tmp_path_factory.mktemp("vs_trl_run")))
    torch.set_num_threads(1)
    return tr


def _reset(env, seed: int):
    return env.reset(TensorDict({LEVEL_SEED: torch.tensor([seed])}, batch_size=[1]))


def _env_step(env, seed: int, reply: str) -> float:
    td = _reset(env, seed)
    answer = History(role="assistant", content=reply, batch_size=(1,))
    td.set(HISTORY_FULL, td[HISTORY_PROMPT].extend(answer.unsqueeze(0), inplace=False, dim=-1))
    return float(env.step(td)["next", REWARD].reshape(-1)[0])


def test_trl_prompts_and_rewards_are_the_envs(bench):
    env = make_env("countdown", num_envs=1)
    for seed in (3, 11, 12345):
        msgs = history_messages(_reset(env, seed)[HISTORY_PROMPT][0])
        assert [(m["role"], m["content"]) for m in bench.countdown_prompt(env, seed)] == msgs
        game = env.game_factory(seed, 0)
        oracle = env.format_reply("solve", [game.oracle_action()])
        wrong = env.format_reply("guess", [" + ".join(str(n) for n in game.numbers)])
        for reply in (oracle, wrong, "no answer block", "<think>x</think><answer>1 +</answer>", ""):
            assert bench.reply_reward(env, seed, reply) == pytest.approx(_env_step(env, seed, reply))
    reward = bench.make_reward_function(env)
    completions = [[{"role": "assistant", "content": oracle}], [{"role": "assistant", "content": "x"}]]
    assert reward(completions=completions, level_seed=[12345, 12345]) == [1.0, env.format_penalty]


def test_trl_config_matches_ours(bench, trainer, tmp_path):
    cfg = trainer.cfg
    args = bench.trl_config(str(tmp_path), cfg, prompts=2, group=2, max_steps=2)
    assert args.generation_batch_size == 4 == int(cfg.algo.mini_batch_size)
    # one optimizer step per generation batch: TRL then skips its separate old-log-prob pass
    assert args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) == 0
    assert (args.per_device_train_batch_size, args.steps_per_generation, args.num_iterations) == (4, 1, 1)
    assert args.beta == 0.0 and not args.gradient_checkpointing and not args.bf16 and args.use_cpu
    assert args.learning_rate == float(cfg.algo.lr) and args.max_completion_length == 4
    assert args.entropy_coef == float(cfg.algo.entropy_coeff) and args.epsilon == float(cfg.algo.clip_epsilon)
    assert args.temperature == 1.0 and args.top_p == 1.0 and not args.shuffle_dataset
    ds = bench.trl_dataset(trainer.env, int(cfg.seed), prompts=2, num_steps=2)
    assert len(ds) == 4 and ds[0]["prompt"][0]["role"] == "system"


def test_instrumented_iteration_has_every_piece(bench, trainer):
    row = bench.timed_iteration(trainer, 1)
    assert set(bench.PIECES) <= set(row)
    assert row["optimizer_steps"] == 1.0 and row["tokens"] > 0
    assert sum(row[k] for k in bench.PIECES) == pytest.approx(row["total"])
    seconds, stats = bench.whole_iteration(trainer, 1)
    assert isinstance(seconds, float) and stats["train/optimizer_steps"] == 1.0


def test_trl_step_is_timed_with_generation_and_without_a_logprob_pass(bench, trainer, tmp_path):
    trl_trainer = bench.build_trl_trainer(trainer.model_path, trainer.env, trainer.cfg, 2, 2, 0, str(tmp_path), 1)
    sections, rows = bench.Sections(), []
    bench.instrument_trl(trl_trainer, sections)
    trl_trainer.add_callback(bench.make_step_timer(sections, 1, lambda step, row: rows.append((step, row))))
    trl_trainer.train()
    assert [step for step, _ in rows] == [1]
    row = rows[0][1]
    assert set(bench.PIECES) <= set(row)
    # the pieces ran inside the timed step: generation and the reward are part of a GRPOTrainer step
    assert {"generation", "env", "loss forward", "backward", "optimizer"} <= set(sections.seconds)
    assert "behaviour log-probs" not in sections.seconds  # on-policy: TRL reuses the loss forward

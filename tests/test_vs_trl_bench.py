"""Smoke test of ``benchmarks/vs_trl.py``'s pieces (ours vs TRL's GRPOTrainer), never of its timings.

The TRL tests are skipped when TRL (the ``bench`` extra) is not installed; the ``--model``
argument handling and the checkpoint builder run without it. Checks that both sides get the same
work: TRL's prompts and reward are the env's own, its config does one optimizer step per
generation batch (so it skips the separate log-prob pass), and that the instrumented
iteration and the TRL step timer produce every piece of the breakdown.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.messages import history_messages
from ragen_torchrl.keys import HISTORY_FULL, HISTORY_PROMPT, LEVEL_SEED, REWARD

needs_trl = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL (the bench extra) not installed")

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


@needs_trl
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


@needs_trl
def test_trl_config_matches_ours(bench, trainer, tmp_path):
    from trl import GRPOConfig

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
    # the other TRL variant: GRPOConfig's default, nothing else changed
    on = bench.trl_config(str(tmp_path), cfg, prompts=2, group=2, max_steps=2, gradient_checkpointing=True)
    assert on.gradient_checkpointing and GRPOConfig.__dataclass_fields__["gradient_checkpointing"].default
    same = [f.name for f in dataclasses.fields(on) if "checkpointing" not in f.name]
    assert [getattr(on, k) for k in same] == [getattr(args, k) for k in same]
    ds = bench.trl_dataset(trainer.env, int(cfg.seed), prompts=2, num_steps=2)
    assert len(ds) == 4 and ds[0]["prompt"][0]["role"] == "system"


def test_instrumented_iteration_has_every_piece(bench, trainer):
    row = bench.timed_iteration(trainer, 1)
    assert set(bench.PIECES) <= set(row)
    assert row["optimizer_steps"] == 1.0 and row["tokens"] > 0
    assert sum(row[k] for k in bench.PIECES) == pytest.approx(row["total"])
    seconds, stats = bench.whole_iteration(trainer, 1)
    assert isinstance(seconds, float) and stats["train/optimizer_steps"] == 1.0


@needs_trl
def test_trl_step_is_timed_with_generation_and_without_a_logprob_pass(bench, trainer, tmp_path):
    trl_trainer = bench.build_trl_trainer(trainer.model_path, trainer.env, trainer.cfg, 2, 2, 0, str(tmp_path), 1)
    sections, rows = bench.Sections(), []
    bench.instrument_trl(trl_trainer, sections)
    trl_trainer.add_callback(bench.make_step_timer(sections, 1, lambda step, row: rows.append((step, row))))
    trl_trainer.train()
    assert [step for step, _ in rows] == [1]
    row = rows[0][1]
    assert set(bench.PIECES) <= set(row)
    assert 0 < row["cpu"]  # the process's CPU seconds over the step
    # the pieces ran inside the timed step: generation and the reward are part of a GRPOTrainer step
    assert {"generation", "env", "loss forward", "backward", "optimizer"} <= set(sections.seconds)
    assert "behaviour log-probs" not in sections.seconds  # on-policy: TRL reuses the loss forward


#: a one-layer checkpoint from the --build-model builder (seconds to build)
SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "vocab_size": 300}


@pytest.fixture(scope="module")
def checkpoint(bench, tmp_path_factory):
    return bench.build_checkpoint(str(tmp_path_factory.mktemp("ckpt") / "my-model"), **SMALL)


def test_build_checkpoint_saves_a_chatml_qwen2_dir_where_asked(checkpoint):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(checkpoint)
    assert (config.model_type, config.hidden_size, config.num_hidden_layers) == ("qwen2", 32, 1)
    tok = AutoTokenizer.from_pretrained(checkpoint)
    assert Path(checkpoint).name == "my-model" and tok.pad_token_id != tok.eos_token_id
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_default_size_is_the_checkpoint_users_ran(bench):
    """--build-model's default sizes: hidden 256, 4 layers, >= 2.5M parameters (counted on the meta device)."""
    import inspect

    from transformers import AutoModelForCausalLM, Qwen2Config

    d = {k: p.default for k, p in inspect.signature(bench.build_checkpoint).parameters.items() if k != "out_dir"}
    assert (d["hidden_size"], d["num_layers"]) == (256, 4)
    # the tiny model's head counts (4 query, 2 key/value heads); the vocabulary at its 768 target
    config = Qwen2Config(
        vocab_size=d["vocab_size"],
        hidden_size=d["hidden_size"],
        intermediate_size=d["intermediate_size"],
        num_hidden_layers=d["num_layers"],
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    # embedding 768 x 256; per layer q, k, v (with bias), o: 65792 + 2 * 32896 + 65536; MLP 3 x 256 x 512; 2 norms
    per_layer = 65792 + 2 * 32896 + 65536 + 3 * 256 * 512 + 2 * 256
    assert n == 768 * 256 + 4 * per_layer + 256 and n >= 2_500_000


def test_model_argument_is_a_local_model_dir(bench, checkpoint, tmp_path, monkeypatch, capsys):
    args = bench.parse_args(["--model", checkpoint])
    assert args.model == checkpoint and args.build_model is None
    assert bench.model_overrides(args.model) == ["model=hf", f"model.name_or_path={checkpoint}"]
    assert bench.parse_args([]).model is None and bench.model_overrides(None) == []
    monkeypatch.chdir(Path(checkpoint).parent)  # a relative path is made absolute
    assert bench.parse_args(["--model", "my-model", "--quick"]).model == checkpoint
    (tmp_path / "weights.bin").write_text("x")
    (tmp_path / "no_tokenizer").mkdir()
    (tmp_path / "no_tokenizer" / "config.json").write_text("{}")
    for bad, why in (
        (str(tmp_path / "missing"), "does not exist"),
        (str(tmp_path / "weights.bin"), "is a file"),
        (str(tmp_path), "no config.json"),
        (str(tmp_path / "no_tokenizer"), "no tokenizer"),
    ):
        with pytest.raises(SystemExit) as e:
            bench.parse_args(["--model", bad])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--model" in err and why in err, err
    with pytest.raises(SystemExit):
        bench.parse_args(["--model", checkpoint, "--build-model", str(tmp_path / "new")])
    assert "build first" in capsys.readouterr().err


def test_trainer_runs_on_the_model_dir(bench, checkpoint, tmp_path):
    """Our side of --model: the Trainer loads the directory itself (model=hf), no tiny model built."""
    overrides = bench.single_turn_overrides(2, 2, 4, 1, False) + bench.model_overrides(checkpoint)
    tr = bench.build_trainer(overrides + [f"model.cache_dir={tmp_path / 'cache'}"], str(tmp_path / "run"))
    assert tr.model_path == checkpoint and tr.cfg.model.name == "hf"
    assert tr.model.config.hidden_size == SMALL["hidden_size"] and not (tmp_path / "cache").exists()
    seconds, stats = bench.whole_iteration(tr, 1)
    assert stats["train/optimizer_steps"] == 1.0

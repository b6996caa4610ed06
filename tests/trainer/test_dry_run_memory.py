"""``trainer.dry_run``'s memory table against hand-computed counts for a small config.

The model: the tiny Qwen2 shape with vocab 300, hidden 32, MLP 64, 2 layers, 4 query / 2 key-value
heads (head_dim 8): 300*32 embedding (tied) + 2 x (q 32*32+32, k and v 32*16+16 each, o 32*32,
MLP 3*32*64, 2 norms of 32) + final norm 32 = 9600 + 2 x 9344 + 32 = 28,320 parameters.
Shapes: prompt 20 + 3 turns x 10 new tokens = 50 tokens a sequence; 2 prompts x 4 samples = 8 rows.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.model_setup import dry_run_report, training_memory

N = 300 * 32 + 2 * ((32 * 32 + 32) + 2 * (32 * 16 + 16) + 32 * 32 + 3 * 32 * 64 + 2 * 32) + 32


def small(**over):
    cfg = OmegaConf.create(
        {
            "model": {
                "name": "tiny",
                "name_or_path": None,
                "vocab_size": 300,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_layers": 2,
                "num_heads": 4,
                "num_kv_heads": 2,
                "device": "cpu",
                "dtype": "bfloat16",
                "precision": "mixed",
                "gradient_checkpointing": False,
                "lora": {"enabled": False, "rank": 4, "target_modules": ["q_proj", "v_proj"]},
            },
            "algo": {"name": "grpo", "kl_coeff": 0.05, "mini_batch_size": 8, "micro_batch_size": None},
            "trainer": {
                "prompts_per_iter": 2,
                "group_size": 4,
                "fsdp": True,
                "dry_run_ranks": 2,
                "dry_run_prompt_tokens": 20,
            },
            "rollout": {"max_new_tokens": 10, "chunk_size": 128},
            "env": {"max_turn": 3},
        }
    )
    for key, value in over.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def test_mixed_precision_fsdp_over_two_ranks_equals_the_hand_count():
    assert N == 28_320
    mem = training_memory(small())
    assert (mem["parameters"], mem["trainable"], mem["mixed"], mem["fsdp"], mem["ranks"]) == (N, N, True, True, 2)
    # sharded over 2 ranks: bf16 weights, fp32 master / gradients / 2 moments, the bf16 reference (kl_coeff > 0)
    assert mem["weights"] == N * 2 // 2 == 28_320
    assert mem["master"] == mem["gradients"] == N * 4 // 2 == 56_640
    assert mem["optimizer"] == 2 * N * 4 // 2 == 113_280
    assert mem["reference"] == N * 2 // 2 and mem["critic"] == 0
    # per rank: ceil(8 / 2) = 4 training rows and 4 rollout rows of 50 tokens
    assert (mem["seq_tokens"], mem["train_rows"], mem["rollout_rows"]) == (50, 4, 4)
    # 2 layers x 4 x 50 tokens x (8 x 32 + 4 x 64) values x 2 bytes
    assert mem["activations"] == 2 * 4 * 50 * 512 * 2 == 409_600
    # checkpointed: each layer's input (4 x 50 x 32 x 2 bytes) + one layer in full
    assert mem["activations_checkpointed"] == 2 * 4 * 50 * 32 * 2 + 4 * 50 * 512 * 2 == 230_400
    assert mem["logits"] == 4 * 50 * 300 * 8 == 480_000  # fp32 logits + log-softmax
    # rows x tokens x layers x (k, v) x kv heads x head_dim x 2 bytes
    assert mem["kv_cache"] == 4 * 50 * 2 * 2 * 2 * 8 * 2 == 25_600
    assert mem["total"] == 28_320 + 2 * 56_640 + 113_280 + 28_320 + 409_600 + 480_000 + 25_600 == 1_198_400
    assert training_memory(small(**{"model.gradient_checkpointing": True}))["total"] == 1_198_400 - 409_600 + 230_400


def test_pure_bf16_lora_and_one_rank():
    pure = training_memory(small(**{"model.precision": "pure", "trainer.fsdp": False}))
    # no master copy; gradients and moments in bf16; nothing sharded (FSDP off), rows still split by rank
    assert (pure["mixed"], pure["fsdp"], pure["master"]) == (False, False, 0)
    assert (pure["weights"], pure["gradients"], pure["optimizer"]) == (N * 2, N * 2, 2 * N * 2)
    # LoRA rank 4 on q (32 -> 32) and v (32 -> 16): 4 x 64 + 4 x 48 per layer; no reference copy
    lora = training_memory(small(**{"model.lora.enabled": True, "trainer.dry_run_ranks": 1}))
    trained = 2 * (4 * 64 + 4 * 48)
    assert lora["trainable"] == trained == 896 and lora["reference"] == 0
    assert (lora["weights"], lora["master"], lora["optimizer"]) == ((N + trained) * 2, trained * 4, 2 * trained * 4)
    assert (lora["fsdp"], lora["train_rows"], lora["rollout_rows"]) == (False, 8, 8)
    # float32 compute: no master copy under mixed precision either
    fp32 = training_memory(small(**{"model.dtype": "float32"}))
    assert (fp32["mixed"], fp32["master"], fp32["gradients"]) == (False, 0, N * 4 // 2)


def test_ranks_come_from_world_size_and_bad_values_are_config_errors(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    mem = training_memory(small(**{"trainer.dry_run_ranks": None}))
    assert (mem["ranks"], mem["weights"], mem["train_rows"]) == (4, N * 2 // 4, 2)
    monkeypatch.setenv("WORLD_SIZE", "zero")
    with pytest.raises(ConfigError, match="trainer.dry_run_ranks"):
        training_memory(small(**{"trainer.dry_run_ranks": None}))


def test_the_report_prints_one_row_per_part():
    out = dry_run_report(small())
    assert "memory per rank of 2 (FSDP: parameters and optimizer state sharded):" in out
    for row in ("weights", "master weights", "gradients", "AdamW moments", "reference", "activations", "logits"):
        assert f"\n  {row} " in out, row
    assert "4 rows x 50 tokens" in out and "KV cache" in out and "total" in out

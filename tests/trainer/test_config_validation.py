"""Config validation: every bad input is a
:class:`ConfigError` naming the key, raised by ``validate_config`` before any env or model is
built and before anything is written. The CLI side (exit status 2, nothing left on disk) is
in ``test_cli.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import ragen_torchrl.model_source as model_source
import ragen_torchrl.models.loading as loading
import ragen_torchrl.trainer.config as config_mod
import ragen_torchrl.trainer.config_paths as config_paths
import ragen_torchrl.trainer.loop as loop_mod
from ragen_torchrl.trainer.config import estimate_iteration_tokens, estimate_tiny_model_bytes, validate_config
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_keys import check_unknown_keys, unknown_keys
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.config_schema import schema_tree
from ragen_torchrl.trainer.config_typing import typed_config
from ragen_torchrl.trainer.loop import Trainer


def make_cfg(tmp_path: Path, *overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=[f"model.cache_dir={tmp_path / 'cache'}", *overrides])


def assert_rejected(tmp_path: Path, overrides: tuple[str, ...], key: str, text: str = "") -> str:
    cfg = make_cfg(tmp_path, *overrides)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    msg = str(err.value)
    assert key in msg, msg
    assert text in msg, msg
    return msg


# every bad input of items 2-5 (the exact inputs of the issue first), with the key the
# message must name and a piece of the expected explanation
BAD = [
    # item 2: "every float is checked finite and in range"; "`seed=abc` must fail at validation"
    (("algo.lr=nan",), "algo.lr", "finite"),
    (("env.format_penalty=nan",), "env.format_penalty", "finite"),
    (("seed=abc",), "seed", "integer"),
    (("algo.lr=inf",), "algo.lr", "finite"),
    (("algo.lr=2.0",), "algo.lr", "at most 1.0"),
    (("sft.lr=nan",), "sft.lr", "finite"),
    (("algo.entropy_coeff=-inf",), "algo.entropy_coeff", "finite"),
    (("algo.kl_coeff=nan",), "algo.kl_coeff", "finite"),
    (("rollout.temperature=inf",), "rollout.temperature", "finite"),
    (("trainer.val_temperature=-0.5",), "trainer.val_temperature", "non-negative"),
    (("rollout.top_p=0",), "rollout.top_p", "(0, 1]"),
    (("rollout.top_p=1.5",), "rollout.top_p", "(0, 1]"),
    (("rollout.top_k=-1",), "rollout.top_k", "positive integer"),
    (("rollout.min_p=1.0",), "rollout.min_p", "[0, 1)"),
    (("rollout.top_k=50",), "rollout.top_k", "truncates the sampling distribution"),
    (("rollout.top_p=0.9",), "rollout.top_p", "full softmax"),
    (("rollout.prime_think=maybe",), "rollout.prime_think", "true or false"),
    (("sft.noise=nan",), "sft.noise", "finite"),
    (("algo.clip_epsilon=[0.2,nan]",), "algo.clip_epsilon[1]", "finite"),
    (("env.format_penalty=0.5",), "env.format_penalty", "<= 0"),
    (("env.reply_format=loose",), "env.reply_format", "strict, lenient"),
    (("algo.weight_decay=-0.1",), "algo.weight_decay", "[0.0, 1.0]"),
    (("algo=ppo", "algo.gamma=1.5"), "algo.gamma", "[0.0, 1.0]"),
    (("sft.seed=abc",), "sft.seed", "integer"),
    (("sft.reasoning=templated",), "sft.reasoning", "'grounded' or 'shuffled'"),
    (("t3.enabled=maybe",), "t3.enabled", "true or false"),
    # item 3: silently accepted nonsense
    (("filter=snr_top_p", "filter.value=1.5"), "filter.value", "(0, 1]"),
    (("filter=snr_top_k", "filter.value=4"), "filter.value", "(0, 1]"),
    (("filter=snr_top_p", "filter.value=nan"), "filter.value", "finite"),
    (("algo.clip_epsilon=5",), "algo.clip_epsilon", "< 1"),
    (("algo=dapo", "algo.clip_epsilon=[0.2,5]"), "algo.clip_epsilon", "<= 1"),
    (("algo.clip_epsilon=[0.2,0.28,0.3]",), "algo.clip_epsilon", "pair"),
    (("algo.dual_clip=0.5",), "algo.dual_clip", "> 1"),
    (("algo.dual_clip=inf",), "algo.dual_clip", "finite"),
    (("algo=gspo", "algo.dual_clip=3.0"), "algo.dual_clip", "GSPO"),
    (("algo=dapo", "algo.dynamic_sampling.criterion=accuracy"), "algo.dynamic_sampling.criterion", "success"),
    (("t3.enabled=true",), "t3.enabled=true", "env.name=frozenlake has none"),
    (("env=sokoban", "t3.enabled=true"), "t3.enabled=true", "guess_numbers"),
    (("env=guess_numbers", "t3.enabled=true", "t3.k=0"), "t3.k", "positive"),
    (("env=guess_numbers", "env.malformed=ignore"), "env.malformed", "auto, end, retry, penalty"),
    (("t3.rule=fast",), "t3.rule", "improve, decrease, reference, drift"),
    (("env=circuit_decoding", "env.presentation=table"), "env.presentation", "indexed, formula"),
    (
        ("env=preference_estimation", "t3.enabled=true", "t3.rule=fast"),
        "t3.rule",
        "improve, decrease, reference, drift",
    ),
    (("env=guess_numbers", "t3.enabled=true", "t3.rule=reference"), "t3.rule", "leave t3.rule null"),
    (("+foo=1",), "foo", "unknown config key"),
    (("+algo.lrr=0.1",), "algo.lrr (did you mean algo.lr?)", "unknown config key"),
    (("+env.sizee=5",), "env.sizee", "unknown config key"),
    (("+trainer.early_stop.collapse_stop.foo=1",), "trainer.early_stop.collapse_stop.foo", "unknown config key"),
    (("+algo.critic_lr=0.1",), "algo.critic_lr", "unknown config key"),  # a PPO key under GRPO
    # moved keys name their new place
    (("+algo.ppo_epochs=2",), "algo.ppo_epochs=2 is now algo.update_epochs", "every algorithm"),
    (("+algo.minibatch=row",), "algo.minibatch='row' is now algo.mini_batch_by", "set algo.mini_batch_by='row'"),
    (("+filter.val_stop.patience=3",), "filter.val_stop is now trainer.early_stop.val_stop", "val_stop.patience=3"),
    (("+filter.max_consecutive_empty=0",), "trainer.early_stop.max_consecutive_empty", "set"),
    # types, checked by the schema
    (("trainer.prompts_per_iter=2.5",), "trainer.prompts_per_iter", "must be an integer, got 2.5"),
    (("trainer.fsdp=yes",), "trainer.fsdp", "true or false"),
    (("trainer.early_stop.val_stop.threshold=2.0",), "trainer.early_stop.val_stop.threshold", "[0.0, 1.0]"),
    (("trainer.early_stop.collapse_stop.warmup=0",), "trainer.early_stop.collapse_stop.warmup", "positive"),
    (("algo.update_epochs=0",), "algo.update_epochs", "positive integer"),
    (("algo.update_epochs=1000",), "algo.update_epochs=1000", "exceeds the limit 100"),
    (("algo.mini_batch_by=rows",), "algo.mini_batch_by", "group, row"),
    # item 4: unbounded sizes
    (("env.size=100000",), "env.size=100000", "exceeds the limit 64"),
    (("env=sokoban", "env.dim=[1000,1000]"), "env.dim", "exceeds the limit 64"),
    (("env=sokoban", "env.max_nodes=100000000"), "env.max_nodes", "exceeds the limit 1000000"),
    (("env=frozenlake_visual", "env.coord_frames=maybe"), "env.coord_frames", ""),
    (("env=sokoban_visual", "env.observation=text"), "env.observation", "image+text"),
    (("env=frozenlake_visual", "+env.tile_pix=28"), "env.tile_pix", "unknown config key"),
    (("env=circuit_decoding", "env.n_inputs=20"), "env.n_inputs=20", "exceeds the limit 8"),
    (("env=preference_estimation", "env.dim=100000"), "env.dim", "exceeds the limit 64"),
    (("env.max_turn=1000",), "env.max_turn=1000", "exceeds the limit 100"),
    (("trainer.val_levels=10000000",), "trainer.val_levels=10000000", "exceeds the limit 65536"),
    (("rollout.max_new_tokens=1000000",), "rollout.max_new_tokens=1000000", "exceeds the limit 32768"),
    (("trainer.prompts_per_iter=100000",), "trainer.prompts_per_iter=100000", "exceeds the limit 4096"),
    (("trainer.group_size=100000",), "trainer.group_size=100000", "exceeds the limit 256"),
    (("sft.episodes=1000000000",), "sft.episodes=1000000000", "exceeds the limit 1000000"),
    (("diagnostics.mi.num_pairs=100000",), "diagnostics.mi.num_pairs", "exceeds the limit 1024"),
    (("model.vocab_size=10000000",), "model.vocab_size", "exceeds the limit"),
    (("env.size=1",), "env.size", "at least 2"),
    # 4096 x 16 x 5 x 4096 = 1,342,177,280 generated tokens > 2^26 = 67,108,864
    (
        ("trainer.prompts_per_iter=4096", "trainer.group_size=16", "rollout.max_new_tokens=4096"),
        "rollout.max_new_tokens = 1,342,177,280 tokens",
        "limit 67,108,864",
    ),
    # 4096 x 32 = 131072 rows > 65536
    (("trainer.prompts_per_iter=4096", "trainer.group_size=32"), "131072 rows", "limit 65536"),
    # 10 turns x 512 tokens = 5120 > the tiny model's 4096 positions
    (("env.max_turn=10", "rollout.max_new_tokens=512"), "env.max_turn x rollout.max_new_tokens = 5120", "4096"),
    (("model.hidden_size=130",), "model.hidden_size=130", "divisible by model.num_heads=4"),
    # item 5: misleading errors
    (("model.name_or_path=/nonexistent",), "model.name_or_path=/nonexistent", "the local path does not exist"),
    (("model=hf", "model.name_or_path=/nonexistent"), "model.name_or_path=/nonexistent", "does not exist"),
    (("algo=ppo", "algo.critic_path=/nonexistent/critic"), "algo.critic_path=/nonexistent/critic", "does not exist"),
    (("env=countdown", "env.data_path=/nonexistent/problems.jsonl"), "env.data_path", "does not exist"),
]


@pytest.mark.parametrize("overrides, key, text", BAD, ids=[" ".join(o) for o, _, _ in BAD])
def test_bad_input_is_a_config_error_naming_the_key(overrides, key, text, tmp_path):
    # "every bad input gets a clear error before any work"
    assert_rejected(tmp_path, overrides, key, text)


@pytest.mark.parametrize(
    "overrides",
    [
        ("algo=ppo", "trainer.group_size=1"),  # a critic baseline: G = 1 is fine
        # a group of one has mean 0 and std 1 (verl, RAGEN): A = R, REINFORCE on the returns
        ("trainer.group_size=1",),
        ("algo=drgrpo", "trainer.group_size=1"),
        ("algo=dapo", "trainer.group_size=1"),
        ("algo=gspo", "trainer.group_size=1"),
        ("algo=dapo_ragen", "trainer.group_size=1"),  # RAGEN-2's "DAPO" is PPO with a critic
        ("algo=gspo",),  # (3e-4, 4e-4): GSPO's tiny sequence-ratio range
        ("algo.dual_clip=3.0",),  # the reference config's dual-clip
        ("env=guess_numbers", "t3.enabled=true"),
        ("env=movie_recommendation", "t3.enabled=true"),
        ("env=circuit_decoding", "t3.enabled=true", "t3.cumulative=true"),
        ("env=movie_recommendation", "t3.enabled=true", "t3.rule=drift"),
        ("env=preference_estimation", "t3.enabled=true", "t3.rule=drift"),  # the reference's live rule
        ("env=preference_estimation", "t3.enabled=true", "t3.rule=decrease"),
        ("algo=grpo", "+algo.aggregation=token_mean"),  # read by build_algorithm for every algorithm
        ("env.size=64",),  # the limit itself is allowed
        ("trainer.resume_allow_changes=true",),
    ],
)
def test_legitimate_configs_pass(overrides, tmp_path):
    validate_config(make_cfg(tmp_path, *overrides))


def test_every_shipped_preset_validates(tmp_path):
    groups = ("algo", "env", "filter", "trainer")
    for group in groups:
        for f in sorted((Path(CONFIG_DIR) / group).glob("*.yaml")):
            validate_config(make_cfg(tmp_path, f"{group}={f.stem}"))


@pytest.mark.parametrize(
    "overrides, key",
    [
        (("algo.lr=nan",), "algo.lr"),
        (("env.format_penalty=nan",), "env.format_penalty"),
        (("seed=abc",), "seed"),
        (("filter=snr_top_p", "filter.value=1.5"), "filter.value"),
        (("algo.clip_epsilon=5",), "algo.clip_epsilon"),
        (("t3.enabled=true",), "t3.enabled"),
        (("+foo=1",), "foo"),
        (("env.size=100000",), "env.size"),
        (("model.name_or_path=/nonexistent",), "model.name_or_path"),
    ],
)
def test_trainer_rejects_before_any_env_or_model_is_built(overrides, key, tmp_path, monkeypatch):
    # config errors come "before any model is built"
    def must_not_run(*args, **kwargs):
        raise AssertionError("reached env/model construction despite a bad config")

    monkeypatch.setattr(Trainer, "_prepare_model", must_not_run)
    monkeypatch.setattr(loop_mod, "load_policy", must_not_run)
    monkeypatch.setattr(loop_mod, "make_env", must_not_run)
    cfg = make_cfg(tmp_path, *overrides)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Trainer(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert not (tmp_path / "cache").exists()


def test_trainer_in_python_rejects_a_run_dir_it_cannot_write(tmp_path, monkeypatch):
    # an unwritable run dir is named before any model is built (not only in the CLI)
    def must_not_run(*args, **kwargs):
        raise AssertionError("reached env/model construction despite a bad run dir")

    monkeypatch.setattr(Trainer, "_prepare_model", must_not_run)
    monkeypatch.setattr(loop_mod, "make_env", must_not_run)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="run_dir=.*a_file"):
        Trainer(make_cfg(tmp_path), run_dir=blocker / "run")


# --------------------------------------------------------------------------- item 3: unknown keys
def test_unknown_keys_against_the_selected_group_options(tmp_path):
    # algo=dapo_ragen has name: ppo, so it may carry PPO's critic keys but not DAPO's sampler
    cfg = make_cfg(tmp_path, "algo=dapo_ragen")
    allowed = schema_tree(cfg)
    assert "critic_lr" in allowed["algo"] and "dynamic_sampling" not in allowed["algo"]
    OmegaConf.set_struct(cfg, False)
    cfg = OmegaConf.merge(cfg, {"algo": {"dynamic_sampling": {"enabled": True}}, "foo": 1})
    assert unknown_keys(cfg, allowed) == ["algo.dynamic_sampling", "foo"]


def test_an_env_registered_at_run_time_may_have_any_keys():
    # no dataclass knows its keys: they go to its builder as they are
    check_unknown_keys({"env": {"name": "my_env", "anything": 1}})
    cfg = typed_config({"env": {"name": "my_env", "anything": 1}})
    assert cfg.env.anything == 1 and cfg.trainer.val_levels == 512


def test_typed_config_fills_the_defaults_and_converts_types():
    # a preset that leaves a key out gets the dataclass default; "1" for an int field is 1
    cfg = typed_config({"trainer": {"group_size": "8"}, "algo": {"name": "dapo"}})
    assert cfg.trainer.group_size == 8 and cfg.trainer.early_stop.collapse_stop.warmup == 10
    assert cfg.algo.dynamic_sampling.criterion == "success" and cfg.algo.overlong.enabled is False
    with pytest.raises(ConfigError, match="trainer.early_stop.val_stop.patience must be an integer, got 'x'"):
        typed_config({"trainer": {"early_stop": {"val_stop": {"patience": "x"}}}})


def test_the_filter_node_is_validated_once_per_validate_config(tmp_path, monkeypatch):
    import ragen_torchrl.transforms.snr as snr

    calls = []
    real = snr.validate_filter_config
    monkeypatch.setattr(snr, "validate_filter_config", lambda cfg: calls.append(1) or real(cfg))
    validate_config(make_cfg(tmp_path, "filter=snr_top_p"))
    assert len(calls) == 1


def test_algo_schema_defaults_are_the_algo_options():
    # one place for every algo default: the typed config of any algorithm takes AlgoOptions' values
    import dataclasses

    from ragen_torchrl.options import AlgoOptions

    cfg = typed_config({"algo": {"name": "registered_later"}})  # every built-in key: the widest schema
    assert OmegaConf.to_container(cfg.algo) == dataclasses.asdict(AlgoOptions(name="registered_later"))


def test_filter_schema_defaults_are_the_filter_defaults():
    # the dataclass and the library's build_filter({...}) default to the same rule (snr_top_p)
    import dataclasses

    from ragen_torchrl.options import FILTER_CONFIG_DEFAULTS
    from ragen_torchrl.trainer.config_schema import FilterConfig

    assert dataclasses.asdict(FilterConfig()) == FILTER_CONFIG_DEFAULTS


# --------------------------------------------------------------------------- item 4: estimates
def test_iteration_token_estimate_by_hand(tmp_path):
    # default run: P=16 prompts x G=4 samples x 5 turns x 48 tokens = 15360 tokens
    assert estimate_iteration_tokens(make_cfg(tmp_path)) == 16 * 4 * 5 * 48 == 15360


def test_tiny_model_memory_estimate_by_hand(tmp_path, monkeypatch):
    # default tiny model: vocab 768, hidden 128, inter 512, 4 layers, 4 heads, 2 kv heads;
    # kv width 128/4*2 = 64; per layer q,o 2*128^2 = 32768, k,v 2*128*64 = 16384, MLP 3*128*512
    # = 196608, 2 norms 256 -> 246016; embeddings in+out 2*768*128 = 196608;
    # 196608 + 4*246016 = 1,180,672 parameters x 16 bytes (weights, grads, 2 Adam moments)
    assert estimate_tiny_model_bytes(make_cfg(tmp_path)) == 1_180_672 * 16
    # a model whose training state exceeds half the RAM is refused before it is built
    monkeypatch.setattr(config_mod, "_physical_memory", lambda: 8 * 2**30)
    msg = assert_rejected(
        tmp_path, ("model.vocab_size=200000", "model.hidden_size=4096"), "model.vocab_size", "GiB to train"
    )
    # 2*200000*4096 + 4*(2*4096^2 + 2*4096*2048 + 3*4096*512 + 2*4096)
    # = 1,638,400,000 + 4*56,631,296 = 1,864,925,184 params x 16 B = 29,838,802,944 B = 27.8 GiB
    assert "27.8 GiB" in msg and "8.0 GiB" in msg


# --------------------------------------------------------------------------- item 5: paths
def test_model_source_kinds(tmp_path, monkeypatch):
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    with pytest.raises(model_source.ModelSourceError, match="not a model directory"):
        model_source.check_model_source(str(model_dir))
    (model_dir / "config.json").write_text("{}")
    assert model_source.check_model_source(str(model_dir)) == "local"
    monkeypatch.setattr(model_source, "_hub_cached", lambda repo: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(model_source, "hub_reachable", lambda timeout=2.0: True)
    assert model_source.check_model_source("some-org/some-model") == "hub"
    monkeypatch.setattr(model_source, "hub_reachable", lambda timeout=2.0: False)
    with pytest.raises(model_source.ModelSourceError, match="this machine may be offline"):
        model_source.check_model_source("some-org/some-model")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(model_source.ModelSourceError, match="offline mode is on"):
        model_source.check_model_source("some-org/some-model")
    with pytest.raises(model_source.ModelSourceError, match="nor a valid Hugging Face hub name"):
        model_source.check_model_source("bad name with spaces")


def test_hub_name_on_an_offline_machine_is_a_config_error(tmp_path, monkeypatch):
    # "for hub names, that this machine may be offline"
    monkeypatch.setattr(model_source, "_hub_cached", lambda repo: False)
    monkeypatch.setattr(model_source, "hub_reachable", lambda timeout=2.0: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert_rejected(
        tmp_path,
        ("model=hf", "model.name_or_path=nonexistent-org/nonexistent-model"),
        "model.name_or_path=nonexistent-org/nonexistent-model",
        "this machine may be offline",
    )


def test_load_pretrained_names_a_missing_path_without_a_hub_traceback():
    with pytest.raises(model_source.ModelSourceError, match="the local path does not exist"):
        loading.load_pretrained("/nonexistent/model")


def test_unwritable_cache_dir_names_the_path(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    # a cache dir below a file can never be created
    assert_rejected(
        tmp_path, (f"model.cache_dir={afile}/cache",), f"model.cache_dir={afile}/cache", f"{afile} is a file"
    )


def test_read_only_dirs_are_reported_by_path(tmp_path, monkeypatch):
    # a read-only dir: creating a file in it fails (simulated: the tests may run as root,
    # which writes through permission bits)
    ro = tmp_path / "ro"
    ro.mkdir()

    def refuse(*args, dir=None, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(config_paths.tempfile, "mkstemp", refuse)
    with pytest.raises(ConfigError, match=rf"model\.cache_dir={ro}/cache is not writable: cannot create files in {ro}"):
        config_paths.check_writable_dir(ro / "cache", "model.cache_dir")
    with pytest.raises(ConfigError, match=rf"hydra\.run\.dir={ro} is not writable"):
        config_paths.check_run_dir(ro)
    assert list(ro.iterdir()) == []  # nothing was created


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_cache_dir_for_real(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert_rejected(tmp_path, (f"model.cache_dir={ro}",), f"model.cache_dir={ro}", "not writable")
    finally:
        ro.chmod(0o755)


def test_resume_without_a_checkpoint_is_a_config_error(tmp_path):
    # "A run dir given to trainer.resume without a checkpoint ... make it a config error"
    run = tmp_path / "old_run"
    (run / "checkpoints").mkdir(parents=True)
    msg = assert_rejected(tmp_path, (f"trainer.resume={run}",), f"trainer.resume={run}", "no checkpoint in")
    assert "last.pt" in msg
    assert_rejected(tmp_path, (f"trainer.resume={tmp_path / 'missing'}",), "trainer.resume", "no such run directory")
    # a previous checkpoint alone is enough (the newest may have been lost; the loader falls back)
    (run / "checkpoints" / "prev.pt").write_bytes(b"x")
    validate_config(make_cfg(tmp_path, f"trainer.resume={run}"))
    with pytest.raises(FileNotFoundError):  # still a FileNotFoundError for callers that catch that
        validate_config(make_cfg(tmp_path, f"trainer.resume={tmp_path / 'missing'}"))


def test_a_registered_objective_passes_the_algo_name_check():
    from ragen_torchrl.objectives import register_algorithm
    from ragen_torchrl.objectives.algorithm import _REGISTRY
    from ragen_torchrl.trainer.config import check_algo_options

    cfg = OmegaConf.create({"algo": {"name": "my_algo"}})
    with pytest.raises(ConfigError, match="algo.name must be one of grpo, drgrpo"):
        check_algo_options(cfg)
    register_algorithm("my_algo", lambda *a, **k: None)
    try:
        check_algo_options(cfg)
    finally:
        _REGISTRY.pop("my_algo", None)


def test_rollout_backend_vllm_is_a_clear_config_error(tmp_path, monkeypatch):
    import importlib.util

    import torch

    assert_rejected(tmp_path, ("rollout.backend=sglang",), "rollout.backend", "hf, vllm")
    real_find_spec = importlib.util.find_spec
    # without vLLM installed: name the extra
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a)
    )
    assert_rejected(tmp_path, ("rollout.backend=vllm",), "rollout.backend=vllm", "pip install 'ragen_torchrl[vllm]'")
    # installed but no GPU: say that it needs CUDA
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real_find_spec(name, *a)
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert_rejected(tmp_path, ("rollout.backend=vllm",), "rollout.backend=vllm", "CUDA")
    validate_config(make_cfg(tmp_path, "rollout.backend=hf"))
    # installed, with a GPU: accepted (the trainer builds the vLLM policy), unless the model stays on the CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    validate_config(make_cfg(tmp_path, "rollout.backend=vllm", "model.device=cuda", "rollout.trajectory=history"))
    validate_config(make_cfg(tmp_path, "rollout.backend=vllm", "model.device=auto", "rollout.trajectory=history"))
    assert_rejected(tmp_path, ("rollout.backend=vllm", "model.device=cpu"), "model.device=cpu", "GPU")
    # token-level trajectories (the default) on either backend
    cfg = validate_config(make_cfg(tmp_path, "rollout.backend=vllm", "model.device=cuda"))
    assert cfg.rollout.trajectory == "tokens"


def test_vllm_with_an_entropy_filter_is_refused(tmp_path):
    # vLLM records no generation entropy: ranking groups by it would rank zeros (checked before the install)
    assert_rejected(
        tmp_path, ("rollout.backend=vllm", "filter=snr_entropy"), "filter.metric=entropy", "rollout.backend=hf"
    )


@pytest.mark.parametrize(
    "override, text",
    [
        ("env.memory_mb=10000000", "env.memory_mb=10000000 exceeds the limit 65536"),
        ("env.max_output_bytes=1099511627776", "env.max_output_bytes=1099511627776 exceeds the limit 67108864"),
        ("env.workers=100000", "env.workers=100000 exceeds the limit 256"),
        ("env.workers=0", "env.workers must be a positive integer, got 0"),
    ],
)
def test_deepcoder_sandbox_sizes_are_bounded(override, text, tmp_path):
    # env.memory_mb, env.max_output_bytes, env.workers had no upper bound
    assert_rejected(tmp_path, ("env=deepcoder", override), text)


@pytest.mark.parametrize("preset", sorted(p.stem for p in (Path(CONFIG_DIR) / "env").glob("*.yaml")))
def test_typed_env_node_adds_only_keys_the_env_accepts(preset, tmp_path):
    # the keys a preset leaves out get the dataclass default, which must be the constructor's own:
    # the env node the trainer passes builds the same env as the preset alone
    import inspect

    from ragen_torchrl.envs import _REGISTRY
    from ragen_torchrl.trainer.model_setup import env_kwargs

    raw = make_cfg(tmp_path, f"env={preset}")
    typed = typed_config(raw)
    added = set(typed.env) - set(raw.env)
    cls = _REGISTRY[typed.env.name]
    params = {}
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            sig = inspect.signature(klass.__init__)
            params.update({k: p.default for k, p in sig.parameters.items() if k not in params})
    for key in added:
        assert key in params and params[key] == typed.env[key], (preset, key)
    assert env_kwargs(typed.env) == {**env_kwargs(raw.env), **{k: typed.env[k] for k in added}}


def test_a_preset_of_your_own_can_take_a_dataclass_as_its_hydra_schema(tmp_path):
    # Hydra's structured-config schema pattern: the dataclass in the defaults list types the preset
    from hydra.errors import ConfigCompositionException

    from ragen_torchrl.trainer.config_schema import register_schemas

    (tmp_path / "algo").mkdir()
    (tmp_path / "config.yaml").write_text("defaults:\n  - algo: mine\n  - _self_\nseed: 0\n")
    (tmp_path / "algo" / "mine.yaml").write_text("defaults:\n  - /schema/algo/grpo@_here_\n  - _self_\nlr: 0.5\n")
    register_schemas()
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        cfg = compose("config")
        assert (cfg.algo.lr, cfg.algo.update_epochs, cfg.algo.mini_batch_by) == (0.5, 1, "group")
        with pytest.raises(ConfigCompositionException, match="algo.lr=abc"):
            compose("config", overrides=["algo.lr=abc"])

"""DeepCoderEnv through the TensorDict contract: prompts, rewards, format penalty, groups and
determinism, content split, data files, config errors, batched grading, demonstrations and a
``trainer=smoke`` end-to-end run."""

from __future__ import annotations

import json

import tensordict

tensordict.set_list_to_stack(True).set()

import pytest  # noqa: E402
import torch  # noqa: E402
from helpers import TINY_RUN  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

from ragen_torchrl.envs import make_env  # noqa: E402
from ragen_torchrl.envs.deepcoder import DeepCoderEnv  # noqa: E402
from ragen_torchrl.envs.games.deepcoder_data import shipped_problems  # noqa: E402
from ragen_torchrl.envs.parsing import parse_response  # noqa: E402
from ragen_torchrl.envs.splits import VAL_SEED_OFFSET  # noqa: E402
from ragen_torchrl.trainer.config_paths import CONFIG_DIR  # noqa: E402
from ragen_torchrl.trainer.demonstrations import make_demonstrations  # noqa: E402

VAL = VAL_SEED_OFFSET


def reset(env, seeds, groups=None):
    n = len(seeds)
    data = {"level_seed": torch.tensor(seeds), "group_id": torch.tensor(groups or [0] * n)}
    return env.reset(TensorDict(data, batch_size=[n]))


def step(env, td, replies):
    n = td.batch_size[0]
    msg = History(role=["assistant"] * n, content=list(replies), batch_size=(n,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    return env.step(td)["next"]


def oracle(env, row):
    return env.format_reply("solve", [env.games[row].oracle_action()])


def test_config_composes_and_builds_the_reference_setting():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=["env=deepcoder"])
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg.env, resolve=True).items() if k != "name"}
    env = make_env(cfg.env.name, num_envs=2, **kwargs)
    assert isinstance(env, DeepCoderEnv) and env.max_turn == 1 and kwargs["data_path"] is None
    td = reset(env, [1, 1])
    assert list(td["history", "prompt"][0].role) == ["system", "user"]
    assert "```python" in env.system_prompt and "hidden tests" in env.system_prompt


def test_oracle_partial_and_wrong_replies():
    env = DeepCoderEnv(num_envs=4)
    seeds = [3, 3, 7, 8]
    td = reset(env, seeds, [0, 0, 1, 2])
    assert td["history", "prompt"][0].content[1] == td["history", "prompt"][1].content[1]  # group shares the problem
    replies = [
        oracle(env, 0),
        env.format_reply("guess", ["```python\nprint('nope')\n```"]),
        oracle(env, 2),
        env.format_reply("guess", ["def f(:"]),
    ]
    nxt = step(env, td, replies)
    assert nxt["reward"].flatten().tolist() == [1.0, 0.0, 1.0, 0.0]
    assert nxt["success"].tolist() == [True, False, True, False]
    assert nxt["done"].all() and nxt["terminated"].all() and not nxt["truncated"].any()
    assert nxt["action_is_valid"].all()
    assert nxt["history", "prompt"][0].content[-1].startswith("All ")


@pytest.mark.parametrize("reward,expected", [("binary", 0.0), ("fraction", 0.25), (None, 0.25)])
def test_sum_of_list_reward_through_the_env(reward, expected):
    # printing 0 passes 1 of sum_of_list's 4 hidden tests (sums -5, 150, 0, 2000000000)
    env = DeepCoderEnv(num_envs=1) if reward is None else DeepCoderEnv(num_envs=1, reward=reward)
    seed = next(s for s in range(200) if env.game_factory(s, 0).problem.problem_id == "sum_of_list")
    td = reset(env, [seed])
    nxt = step(env, td, [env.format_reply("zero", ["print(0)"])])
    assert nxt["reward"].item() == expected and not nxt["success"].item()


def test_malformed_replies_get_the_format_penalty_and_change_nothing():
    malformed = ["", "no tags", "<think>x</think>", "<think>x</think><answer></answer>", "```python\nprint(1)\n```"]
    env = DeepCoderEnv(num_envs=len(malformed))
    td = reset(env, [11] * len(malformed))
    before = td["history", "prompt"][0].content[1]
    runs = env.grader.runs
    nxt = step(env, td, malformed)
    assert torch.allclose(nxt["reward"], torch.full((len(malformed), 1, 1), -0.1))
    assert not nxt["action_is_valid"].any()
    assert nxt["truncated"].all() and not nxt["terminated"].any()  # the one turn is used up
    for r in range(len(malformed)):
        assert nxt["history", "prompt"][r].content[-1] == "Invalid reply.\n" + before
        assert env.games[r].render_text() == before and env.games[r].attempt == 0
    assert env.grader.runs == runs  # nothing ran


def test_a_group_of_identical_programs_runs_once():
    env = DeepCoderEnv(num_envs=8)
    td = reset(env, [5] * 8)
    runs = env.grader.runs
    nxt = step(env, td, [oracle(env, 0)] * 8)
    assert nxt["success"].all()
    assert env.grader.runs - runs == 1 + len(env.games[0].problem.hidden_tests)  # compile check + tests


def test_deterministic_across_envs():
    outs = []
    for _ in range(2):
        env = DeepCoderEnv(num_envs=3)
        td = reset(env, [21, 21, 22], [0, 0, 1])
        nxt = step(env, td, [oracle(env, 0), "<think>a</think><answer>print(1)</answer>", oracle(env, 2)])
        outs.append((td["history", "prompt"][0].content[1], nxt["reward"].flatten().tolist()))
    assert outs[0] == outs[1]


def test_validation_problems_are_disjoint_from_training_problems():
    env = DeepCoderEnv(num_envs=1)
    train = {env.game_factory(s, 0).problem.key for s in range(200)}
    val = {env.game_factory(VAL + s, 0).problem.key for s in range(200)}
    demo = {env.game_factory(2 * VAL + s, 0).problem.key for s in range(200)}
    assert val and train and not (train & val) and not (demo & val)
    assert len(train | val) == len(shipped_problems())
    assert len(val) == 3  # ceil(0.1 * 27)


def test_feedback_turns_through_the_env():
    env = DeepCoderEnv(num_envs=1, max_turn=2)
    assert env.max_actions_per_traj == 2
    seed = next(s for s in range(200) if env.game_factory(s, 0).problem.problem_id == "sum_of_list")
    td = reset(env, [seed])
    nxt = step(env, td, [env.format_reply("x", ["print(0)"])])
    assert not nxt["done"].item() and nxt["reward"].item() == 0.0
    assert "example tests" in nxt["history", "prompt"][0].content[-1]
    nxt2 = step(env, nxt, [oracle(env, 0)])
    assert nxt2["done"].item() and nxt2["reward"].item() == 1.0


def test_data_files_and_split(tmp_path):
    recs = [
        {"prompt": f"Print {i}.", "tests": [{"input": x, "output": f"{i}\n"} for x in "abc"], "solution": f"print({i})"}
        for i in range(20)
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    env = DeepCoderEnv(num_envs=1, data_path=str(path))
    assert (len(env.problems["train"]), len(env.problems["val"])) == (18, 2)
    val_path = tmp_path / "val.jsonl"
    val_path.write_text(json.dumps(recs[0]) + "\n")
    env = DeepCoderEnv(num_envs=1, data_path=str(path), val_data_path=str(val_path))
    assert env.game_factory(VAL, 0).problem.question == "Print 0."
    td = reset(env, [4])
    assert step(env, td, [oracle(env, 0)])["reward"].item() == 1.0


@pytest.mark.parametrize(
    "cfg,match",
    [
        ({"data_path": "/nonexistent/x.jsonl"}, r"x.jsonl: file not found"),
        ({"val_data_path": "v.jsonl"}, "val_data_path needs data_path"),
        ({"val_fraction": 1.5}, "val_fraction"),
        ({"num_public": -1}, "num_public"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"memory_mb": 8}, "memory_mb"),
        ({"memory_mb": 1 << 20}, r"memory_mb must be an int in \[64, 65536\], got 1048576"),
        ({"max_output_bytes": 1 << 30}, "max_output_bytes"),
        ({"isolation": "vm"}, "isolation"),
        ({"isolation": "process"}, "isolation"),
        ({"workers": 0}, "workers"),
        ({"workers": 10_000}, "workers"),
        ({"reward": "partial"}, "reward"),
        ({"skip_after_timeout": 1}, "skip_after_timeout"),
        ({"max_turn": 0}, "max_turn"),
        ({"limit": 0}, "limit"),
    ],
)
def test_bad_config_values_are_named(cfg, match):
    with pytest.raises(ValueError, match=match):
        DeepCoderEnv(num_envs=1, **cfg)


@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_demonstrations(noise):
    env = DeepCoderEnv(num_envs=1)
    demos = make_demonstrations(env, num_episodes=4, noise=noise, seed=1)
    for chat in demos:
        assert chat[0]["content"] == env.system_prompt and len(chat) == 3
        parsed = parse_response(chat[2]["content"], None, 1)
        assert parsed.is_valid and parsed.think.startswith("The task:")
        assert ("return 0" in parsed.answer or "print(0)" in parsed.answer) == (noise == 1.0)


@pytest.mark.slow
def test_deepcoder_trains_end_to_end_on_smoke(ragen_cache_dir, tmp_path):
    from ragen_torchrl.trainer.loop import Trainer

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "config", overrides=["env=deepcoder", "trainer=smoke", *TINY_RUN, f"model.cache_dir={ragen_cache_dir}"]
        )
    torch.manual_seed(0)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    summary = trainer.fit()
    assert summary["iterations"] == 2 and len(trainer.history) == 2
    assert (tmp_path / "run" / "checkpoints").is_dir()

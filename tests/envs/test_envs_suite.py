"""The RAGEN environment suite as TorchRL envs: Sokoban, Bandit, Countdown, MetaMathQA.

Each env is checked through the same TensorDict contract as FrozenLake: reset gives a
system + user prompt, a correct (oracle) reply is rewarded, malformed replies get the
format penalty and never raise, a prompt group shares its level, everything is
deterministic in the seeds, and validation levels are disjoint from training levels.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import tensordict

tensordict.set_list_to_stack(True).set()

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

from ragen_torchrl.envs import available_envs, make_env  # noqa: E402
from ragen_torchrl.envs.games.bandit import TRAIN_NAME_PAIRS, VAL_NAME_PAIRS  # noqa: E402
from ragen_torchrl.envs.games.metamathqa import INCORRECT_FEEDBACK  # noqa: E402
from ragen_torchrl.envs.sokoban import SokobanEnv  # noqa: E402
from ragen_torchrl.envs.splits import VAL_SEED_OFFSET, in_val_bucket, level_split  # noqa: E402
from ragen_torchrl.envs.text_env import TextGameEnv, sample_seed  # noqa: E402
from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR  # noqa: E402
from ragen_torchrl.trainer.demonstrations import make_demonstrations  # noqa: E402

CONFIG_DIR = Path(PACKAGE_CONFIG_DIR)
NEW_ENVS = ("sokoban", "bandit", "countdown", "metamathqa")
VAL = VAL_SEED_OFFSET
PENALTY = -0.1

MALFORMED = [
    "",
    "no tags at all",
    "<think>x</think>",
    "<think>x</think><answer></answer>",
    "<answer>Up</answer>",  # no think block
    "<think>" + "é∑😀" * 50,
]


# --------------------------------------------------------------------------- helpers
def reset(env: TextGameEnv, level_seeds, group_ids=None, sample_seeds=None) -> TensorDict:
    n = len(level_seeds)
    data = {"level_seed": torch.tensor(level_seeds), "group_id": torch.tensor(group_ids or [0] * n)}
    if sample_seeds is not None:
        data["sample_seed"] = torch.tensor(sample_seeds)
    return env.reset(TensorDict(data, batch_size=[n]))


def step(env: TextGameEnv, td: TensorDict, replies: list[str]) -> TensorDict:
    n = td.batch_size[0]
    msg = History(role=["assistant"] * n, content=list(replies), batch_size=(n,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    return env.step(td)["next"]


def oracle_reply(env: TextGameEnv, row: int, k: int | None = None) -> str:
    """The oracle's next ``k`` actions (default: the env's per-turn maximum), formatted by the env."""
    game = env.games[row]
    k = k or env.max_actions_per_turn
    if hasattr(game, "solve") and game.action_names:  # Sokoban: take a chunk of the plan
        return env.format_reply("plan", game.solve()[:k])
    return env.format_reply("plan", [game.oracle_action()])


def first_user(td: TensorDict, row: int) -> str:
    return td["history", "prompt"][row].content[1]


def build(name: str, n: int = 2, **cfg) -> TextGameEnv:
    return make_env(name, num_envs=n, **cfg)


def sokoban_seed_with_short_plan(env: SokobanEnv, start: int = 0, max_len: int = 10) -> tuple[int, list[str]]:
    for seed in range(start, start + 200):
        plan = env.game_factory(seed, 0).solve()
        if plan and len(plan) <= max_len:
            return seed, plan
    raise AssertionError("no short Sokoban level found")


# --------------------------------------------------------------------------- registry and configs
def test_registry_lists_every_env():
    assert set(NEW_ENVS) | {"frozenlake"} <= set(available_envs())


@pytest.mark.parametrize("config", ["frozenlake", "sokoban", "sokoban_8x8", "bandit", "countdown", "metamathqa"])
def test_hydra_env_config_builds_the_env(config):
    """What ``ragen-train env=<config>`` does: compose, drop ``name``, ``make_env(name, **rest)``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=[f"env={config}"])
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg.env, resolve=True).items() if k != "name"}
    for key in ("max_turn", "max_actions_per_turn", "max_actions_per_traj", "format_penalty"):
        assert key in kwargs, f"configs/env/{config}.yaml lacks {key}"
    env = make_env(cfg.env.name, num_envs=2, **kwargs)
    assert isinstance(env, TextGameEnv) and cfg.env.name in available_envs()
    td = reset(env, [1, 1])
    assert list(td["history", "prompt"][0].role) == ["system", "user"]
    if config == "sokoban_8x8":
        assert (env.games[0].height, env.games[0].width, len(env.games[0].boxes)) == (8, 8, 2)
    if config in ("bandit", "countdown"):
        assert env.max_turn == 1
    if config == "metamathqa":
        assert env.max_turn == 5 and kwargs["data_path"] is None


# --------------------------------------------------------------------------- reset contract
@pytest.mark.parametrize("name", NEW_ENVS)
def test_reset_gives_system_and_user_prompt_and_contract_keys(name):
    env = build(name, 3)
    td = reset(env, [5, 5, 9], group_ids=[0, 0, 1])
    for row in range(3):
        assert list(td["history", "prompt"][row].role) == ["system", "user"]
        assert td["history", "prompt"][row].content[0] == env.system_prompt
    assert td["group_id"].tolist() == [0, 0, 1]
    for key in ("turn", "progress", "success", "action_is_valid", "action_is_effective"):
        assert td[key].shape == (3,)
    assert td["done"].shape == (3, 1) and not td["done"].any()


# --------------------------------------------------------------------------- correct replies
def test_sokoban_oracle_solves_a_generated_level():
    env = build("sokoban", 1)
    seed, plan = sokoban_seed_with_short_plan(env)
    td = reset(env, [seed])
    total = 0.0
    for turn in range(env.max_turn):
        nxt = step(env, td, [oracle_reply(env, 0)])
        total += nxt["reward"].item()
        assert nxt["action_is_valid"].item() and nxt["action_is_effective"].item()
        assert nxt["reward"].shape == (1, 1, 1)
        if nxt["done"].item():
            break
        td = nxt
    assert nxt["success"].item() and nxt["terminated"].item() and not nxt["truncated"].item()
    # -0.1 per step, +1 box on target, +10 solved (1 box)
    assert total == pytest.approx(-0.1 * len(plan) + 11.0)
    assert nxt["progress"].item() == 0.0


def test_sokoban_8x8_two_boxes_oracle_moves_are_effective():
    env = build("sokoban", 1, dim=[8, 8], num_boxes=2)
    td = reset(env, [3])
    nxt = step(env, td, [oracle_reply(env, 0)])
    assert nxt["action_is_valid"].item() and nxt["action_is_effective"].item()
    assert len(env.games[0].boxes) == 2


def test_sokoban_wall_bump_is_valid_but_not_effective():
    env = build("sokoban", 1, level="#####\n#P_X#\n#__O#\n#####")
    td = reset(env, [0])
    nxt = step(env, td, ["<think>up</think><answer>Up</answer>"])
    assert nxt["action_is_valid"].item() and not nxt["action_is_effective"].item()
    assert nxt["reward"].item() == pytest.approx(-0.1)


def test_bandit_oracle_pull_is_success_and_one_turn():
    env = build("bandit", 2)
    td = reset(env, [4, 4], sample_seeds=[sample_seed(4, 0), sample_seed(4, 1)])
    high = env.games[0].high_risk_arm
    nxt = step(env, td, [oracle_reply(env, 0), env.format_reply("safe", [env.games[1].low_risk_arm])])
    assert nxt["done"].all() and nxt["terminated"].all()
    assert nxt["success"].tolist() == [True, False]
    assert nxt["reward"][0].item() in (0.0, 1.0) and nxt["reward"][1].item() == pytest.approx(0.1)
    assert oracle_reply(env, 0).count(high) == 1
    # arm names are matched case-insensitively against this row's own names
    td = reset(env, [4, 4])
    nxt = step(env, td, [env.format_reply("x", [high.upper()]), env.format_reply("x", [f"  {high.lower()} "])])
    assert nxt["action_is_valid"].all() and nxt["success"].all()


def test_bandit_names_are_per_level_and_other_names_are_invalid():
    env = build("bandit", 2)
    names = [env.game_factory(s, 0).action_names for s in range(40)]
    assert len({frozenset(n) for n in names}) > 1
    td = reset(env, [0, 0])
    wrong = next(n for pair in TRAIN_NAME_PAIRS for n in pair if n not in env.games[0].action_names)
    nxt = step(env, td, [env.format_reply("x", [wrong]), env.format_reply("x", ["Up"])])
    assert not nxt["action_is_valid"].any()
    assert torch.allclose(nxt["reward"], torch.full((2, 1, 1), PENALTY))
    assert nxt["done"].all() and nxt["truncated"].all() and not nxt["success"].any()


def test_bandit_group_shares_arms_but_payouts_vary_with_sample_seed():
    n = 64
    env = build("bandit", n, payout_seeding="sample")  # the default, "level", shares the draw
    td = reset(env, [7] * n, group_ids=[0] * n, sample_seeds=[sample_seed(7, g) for g in range(n)])
    assert len({first_user(td, r) for r in range(n)}) == 1
    nxt = step(env, td, [oracle_reply(env, r) for r in range(n)])
    assert set(nxt["reward"].flatten().tolist()) == {0.0, 1.0}


def test_countdown_oracle_scores_one_and_wrong_numbers_score_less():
    env = build("countdown", 3)
    td = reset(env, [2, 2, 2])
    game = env.games[0]
    all_numbers = " + ".join(str(n) for n in game.numbers)
    correct_by_sum = sum(game.numbers) == game.target
    nxt = step(
        env, td, [oracle_reply(env, 0), env.format_reply("x", [all_numbers]), env.format_reply("x", ["1000000"])]
    )
    assert nxt["reward"].flatten().tolist() == pytest.approx([1.0, 1.0 if correct_by_sum else 0.1, 0.0])
    assert nxt["success"].tolist() == [True, correct_by_sum, False]
    assert nxt["action_is_valid"].all() and nxt["done"].all() and nxt["terminated"].all()
    assert nxt["action_is_effective"].tolist() == [True, True, False]


def test_metamathqa_reward_halves_per_attempt_and_feedback_is_shown():
    env = build("metamathqa", 1)
    td = reset(env, [3])
    answer = env.games[0].answer
    nxt = step(env, td, [env.format_reply("guess", ["-12345"])])
    assert nxt["reward"].item() == 0.0 and not nxt["done"].item() and nxt["action_is_valid"].item()
    assert nxt["history", "prompt"][0].content[-1] == INCORRECT_FEEDBACK
    nxt = step(env, nxt, [env.format_reply("fix", [f"The answer is: ${answer}$."])])
    assert nxt["reward"].item() == 0.5 and nxt["done"].item() and nxt["success"].item() and nxt["terminated"].item()
    assert nxt["turn"].item() == 2


def test_metamathqa_five_wrong_answers_end_the_episode():
    env = build("metamathqa", 1)
    td = reset(env, [3])
    for attempt in range(5):
        td = step(env, td, [env.format_reply("guess", ["-12345"])])
        assert td["done"].item() == (attempt == 4)
    assert not td["success"].item()


# --------------------------------------------------------------------------- malformed replies
@pytest.mark.parametrize("name", NEW_ENVS)
def test_malformed_replies_get_the_format_penalty(name):
    n = len(MALFORMED)
    env = build(name, n)
    td = reset(env, [11] * n)
    before = [first_user(td, r) for r in range(n)]
    nxt = step(env, td, MALFORMED)
    assert torch.allclose(nxt["reward"], torch.full((n, 1, 1), PENALTY))
    assert not nxt["action_is_valid"].any() and not nxt["success"].any()
    for r in range(n):
        assert nxt["history", "prompt"][r].content[-1].startswith("Invalid reply.")
        # state unchanged: the observation after the prefix is the first one again
        if name != "metamathqa":
            assert nxt["history", "prompt"][r].content[-1].endswith(before[r])


@pytest.mark.parametrize("name", NEW_ENVS)
def test_hostile_answers_never_raise(name):
    hostile = [
        "<think>x</think><answer>" + " || ".join(["Up", "Left"] * 3000) + "</answer>",
        "<think>x</think><answer>" + "9" * 6000 + "</answer>",
        "<think>x</think><answer>" + "1" * 5000 + "/2</answer>",
        "<think>x</think><answer>\\frac{" + "1" * 5000 + "}{2}</answer>",
        "<think>x</think><answer>" + "(" * 500 + "1" + ")" * 500 + "</answer>",
        "<think>x</think><answer>é∑😀 ∞ ÷ × −</answer>",
        "<think>x</think><answer>\x00\x01</answer>",
    ]
    n = len(hostile)
    env = build(name, n)
    td = reset(env, [1] * n)
    nxt = step(env, td, hostile)
    assert nxt["reward"].shape == (n, 1, 1)
    assert (nxt["reward"] <= 1.0).all()
    if name in ("countdown", "metamathqa"):  # free-form: an answer is a (wrong) attempt, not a format error
        assert not nxt["success"].any()


# --------------------------------------------------------------------------- groups, determinism, splits
@pytest.mark.parametrize("name", NEW_ENVS)
def test_group_shares_level_and_everything_is_deterministic(name):
    seeds, groups = [21, 21, 21, 22], [0, 0, 0, 1]
    samples = [sample_seed(s, g) for s, g in zip(seeds, [0, 1, 2, 0])]
    runs = []
    for _ in range(2):
        env = build(name, 4)
        td = reset(env, seeds, group_ids=groups, sample_seeds=samples)
        prompts = [first_user(td, r) for r in range(4)]
        nxt = step(env, td, [oracle_reply(env, r) for r in range(4)])
        runs.append(
            (prompts, nxt["reward"].flatten().tolist(), [nxt["history", "prompt"][r].content[-1] for r in range(4)])
        )
    prompts = runs[0][0]
    assert prompts[0] == prompts[1] == prompts[2]
    assert runs[0] == runs[1]


def test_val_seeds_are_split_by_seed_range():
    assert [level_split(s) for s in (0, VAL - 1, VAL, 2 * VAL - 1, 2 * VAL)] == [
        "train",
        "train",
        "val",
        "val",
        "train",
    ]


def test_sokoban_validation_rooms_are_disjoint_from_training_rooms():
    env = build("sokoban", 1)
    train = {env.game_factory(s, 0).to_text() for s in range(400)}
    val = {env.game_factory(VAL + s, 0).to_text() for s in range(100)}
    demo = {env.game_factory(2 * VAL + s, 0).to_text() for s in range(50)}
    assert train.isdisjoint(val) and demo.isdisjoint(val)
    assert all(in_val_bucket(t, env.val_fraction) for t in val)
    assert len(val) > 50  # still many distinct validation rooms
    for s in (VAL, VAL + 7):  # validation rooms are solvable like any other
        assert env.game_factory(s, 0).solve()


def test_bandit_validation_uses_held_out_names():
    env = build("bandit", 1)
    val_names = {n for pair in VAL_NAME_PAIRS for n in pair}
    train_names = {n for pair in TRAIN_NAME_PAIRS for n in pair}
    assert all(set(env.game_factory(VAL + s, 0).action_names) <= val_names for s in range(50))
    # training and demonstration seeds never see a held-out name
    for s in list(range(50)) + [2 * VAL + s for s in range(50)]:
        assert set(env.game_factory(s, 0).action_names) <= train_names


@pytest.mark.parametrize("name", ["countdown", "metamathqa"])
def test_generated_problems_are_split_by_content(name):
    env = build(name, 1)

    def key(g):
        return (g.target, tuple(sorted(g.numbers))) if name == "countdown" else g.question

    train = {key(env.game_factory(s, 0)) for s in range(300)}
    val = {key(env.game_factory(VAL + s, 0)) for s in range(100)}
    assert train.isdisjoint(val) and len(val) > 50


# --------------------------------------------------------------------------- data files
def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_metamathqa_from_jsonl_file_splits_deterministically(tmp_path):
    records = [
        {"query": f"What is {i} + {i}?", "response": f"{i} + {i} = {2 * i}. The answer is: {2 * i}"} for i in range(40)
    ]
    path = write_jsonl(tmp_path / "mm.jsonl", records)
    env = make_env("metamathqa", num_envs=2, data_path=str(path))
    train, val = env.problems["train"], env.problems["val"]
    assert len(val) == 4 and len(train) == 36  # ceil(0.1 * 40) held out
    assert {p.question for p in train}.isdisjoint({p.question for p in val})
    # the split depends on content, not on file order
    shuffled = write_jsonl(tmp_path / "mm_rev.jsonl", records[::-1])
    assert set(make_env("metamathqa", num_envs=1, data_path=str(shuffled)).problems["val"]) == set(val)
    assert {env.game_factory(s, 0).question for s in range(200)} <= {p.question for p in train}
    assert {env.game_factory(VAL + s, 0).question for s in range(20)} == {p.question for p in val}
    # play: the oracle answer from the file is rewarded
    td = reset(env, [5, 5])
    nxt = step(env, td, [oracle_reply(env, 0), env.format_reply("x", ["nope"])])
    assert nxt["reward"].flatten().tolist() == [1.0, 0.0]


def test_metamathqa_separate_validation_file(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"question": "What is 1 + 1?", "answer": "2"}])
    val = write_jsonl(tmp_path / "val.jsonl", [{"question": "What is 3 + 3?", "answer": "6"}])
    env = make_env("metamathqa", num_envs=1, data_path=str(train), val_data_path=str(val))
    assert env.game_factory(0, 0).question == "What is 1 + 1?"
    assert env.game_factory(VAL, 0).question == "What is 3 + 3?"


def test_metamathqa_missing_or_malformed_file_names_file_and_fields(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ValueError, match="nope.jsonl") as err:
        make_env("metamathqa", num_envs=1, data_path=str(missing))
    assert "query" in str(err.value) and "response" in str(err.value)
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{"query": "What is 1 + 1?", "response": "2. The answer is: 2"}, {"prompt": "x"}]
    )
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 2") as err:
        make_env("metamathqa", num_envs=1, data_path=str(bad))
    assert "question" in str(err.value) and "answer" in str(err.value)
    one = write_jsonl(tmp_path / "one.jsonl", [{"question": "What is 1 + 1?", "answer": "2"}])
    with pytest.raises(ValueError, match="one.jsonl.*val_data_path"):
        make_env("metamathqa", num_envs=1, data_path=str(one))


def test_countdown_from_jsonl_file(tmp_path):
    records = [
        {"target": 24, "nums": [3, 4, 6]},
        {"target": 10, "nums": [2, 5, 7]},
        {"target": 12, "numbers": [3, 4, 9]},
    ]
    path = write_jsonl(tmp_path / "cd.jsonl", records)
    env = make_env("countdown", num_envs=1, data_path=str(path), val_fraction=0.34)
    pools = env.problems
    assert len(pools["train"]) + len(pools["val"]) == 3 and pools["val"] and pools["train"]
    assert set(pools["train"]).isdisjoint(pools["val"])
    td = reset(env, [VAL + 1])
    assert env.games[0].target in {p.target for p in pools["val"]}
    assert step(env, td, [oracle_reply(env, 0)])["reward"].item() == 1.0
    bad = write_jsonl(tmp_path / "cd_bad.jsonl", [{"target": "x", "nums": [1]}])
    with pytest.raises(ValueError, match=r"cd_bad\.jsonl, line 1.*'target'.*'nums'"):
        make_env("countdown", num_envs=1, data_path=str(bad))


# --------------------------------------------------------------------------- config validation
@pytest.mark.parametrize(
    "name, cfg, match",
    [
        ("sokoban", {"dim": [6]}, "dim"),
        ("sokoban", {"dim": [2, 6]}, "height"),
        ("sokoban", {"num_boxes": 0}, "num_boxes"),
        ("sokoban", {"dim": [4, 4], "num_boxes": 4}, "does not fit"),
        ("sokoban", {"max_nodes": -1}, "max_nodes"),
        ("sokoban", {"val_fraction": 1.0}, "val_fraction"),
        ("sokoban", {"level": "#####\n#PZ_#\n#####"}, "unknown symbol"),
        ("sokoban", {"max_turn": 0}, "max_turn"),
        ("bandit", {"max_actions_per_turn": 0}, "max_actions_per_turn"),
        ("countdown", {"num_numbers": 1}, "num_numbers"),
        ("countdown", {"max_number": 0}, "max_number"),
        ("countdown", {"val_data_path": "v.jsonl"}, "data_path"),
        ("countdown", {"data_path": 3}, "data_path"),
        ("metamathqa", {"limit": 0}, "limit"),
        ("metamathqa", {"val_fraction": -0.1}, "val_fraction"),
        ("metamathqa", {"max_turn": "5"}, "max_turn"),
    ],
)
def test_bad_config_raises_clear_value_error(name, cfg, match):
    with pytest.raises(ValueError, match=match):
        make_env(name, num_envs=1, **cfg)


# --------------------------------------------------------------------------- demonstrations
@pytest.mark.parametrize("name", NEW_ENVS)
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_demonstrations_are_well_formed(name, noise):
    env = build(name, 1)
    demos = make_demonstrations(env, num_episodes=6, noise=noise, seed=1)
    from ragen_torchrl.envs.parsing import parse_response

    for chat in demos:
        assert chat[0]["content"] == env.system_prompt
        replies = [m["content"] for m in chat if m["role"] == "assistant"]
        assert replies and len(replies) <= env.max_turn
        for reply in replies:
            parsed = parse_response(reply, None, env.max_actions_per_turn)
            assert parsed.is_valid and parsed.think


def test_noise_free_demonstrations_succeed():
    for name in ("bandit", "countdown", "metamathqa"):
        env = build(name, 1)
        for chat in make_demonstrations(env, num_episodes=5, noise=0.0, seed=2):
            assert len(chat) == 3, name  # one right answer, episode over
    env = build("countdown", 1)
    noisy = make_demonstrations(env, num_episodes=20, noise=1.0, seed=3)
    assert all(len(chat) == 3 for chat in noisy)
    assert sum("which is not" in chat[2]["content"] for chat in noisy) > 10  # mostly wrong on purpose


def _first_action(reply: str) -> str:
    from ragen_torchrl.envs.parsing import parse_response

    return parse_response(reply, ("Left", "Down", "Right", "Up"), 2).actions[0]


def test_demonstration_noise_kinds():
    import random

    env = make_env("frozenlake", num_envs=1)
    rng = random.Random(0)
    counts = {a: 0 for a in ("Left", "Down", "Right", "Up")}
    greedy_hits = n = 0
    for level in range(400):
        game = env.game_factory(level, sample_seed(level, 0))
        greedy = game.greedy_action()
        reply, _, _ = env.demo_turn(game, rng, 1.0, 10, noise_kind="heuristic")
        greedy_hits += _first_action(reply) == greedy
        game = env.game_factory(level, sample_seed(level, 0))
        reply, _, _ = env.demo_turn(game, rng, 1.0, 10, noise_kind="uniform")
        counts[_first_action(reply)] += 1
        n += 1
    assert greedy_hits == n  # heuristic noise always plays the biased heuristic
    for a, c in counts.items():  # uniform: 1/4 each, within 4 binomial standard errors
        assert abs(c / n - 0.25) < 4 * (0.25 * 0.75 / n) ** 0.5, (a, c)
    with pytest.raises(ValueError, match="noise_kind"):
        make_demonstrations(env, num_episodes=1, noise=0.5, noise_kind="gaussian")


def test_arithmetic_preset_is_metamathqa_in_one_attempt():
    """``env=arithmetic``: metamathqa's synthetic questions, and a wrong answer ends the episode at reward 0."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=["env=arithmetic"])
        base = compose(config_name="config", overrides=["env=metamathqa"])
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg.env, resolve=True).items() if k != "name"}
    differs = {k for k in kwargs if kwargs[k] != base.env[k]}
    assert cfg.env.name == "metamathqa" and differs == {"max_turn", "max_actions_per_traj"}
    assert (kwargs["max_turn"], kwargs["max_actions_per_traj"], kwargs["data_path"]) == (1, 1, None)
    env = make_env(cfg.env.name, num_envs=2, **kwargs)
    with tensordict.set_list_to_stack(True):
        td = reset(env, [7, 7])
    game = env.games[0]
    # the synthetic question (a + b, a x c, a subtraction or the two-step pens problem), one answer
    assert game.question.startswith(("What is", "Tom has", "A box holds")) and game.max_attempts == 1
    wrong = str(int(game.answer) + 1)
    assert game.step(wrong) == (0.0, True, {"success": False, "action_is_effective": True})
    assert td is not None


def test_arithmetic_demonstrations_guess_with_noise_and_say_one_try():
    """One attempt: the prompt promises no second try, and ``sft.noise`` makes the only attempt a guess
    (a nearby wrong number without the worked solution), as in the other envs' noisy demonstrations."""
    env = make_env("metamathqa", num_envs=1, max_turn=1, max_actions_per_traj=1)
    assert "one try" in env.system_prompt and "try again" not in env.system_prompt
    assert "try again" in make_env("metamathqa", num_envs=1).system_prompt
    rng = random.Random(4)
    for level in range(8):
        with tensordict.set_list_to_stack(True):
            reset(env, [level])
        right = env.games[0].answer
        reply, done, _ = env.demo_turn(env.games[0], rng, 1.0, 1)
        guess = reply.split("<answer>")[1].split("</answer>")[0]
        assert done and "I think the answer is" in reply and int(guess) - int(right) in (-10, -2, -1, 1, 2, 10)
    for chat in make_demonstrations(env, num_episodes=4, noise=0.0, seed=4):
        (reply,) = [m["content"] for m in chat if m["role"] == "assistant"]
        assert "So the answer is" in reply
    # the changed demonstrations are a new warm-start cache key; several attempts keep theirs
    assert env.demo_revision == 1 and make_env("metamathqa", num_envs=1).demo_revision == 0

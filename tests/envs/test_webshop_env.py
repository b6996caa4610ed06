"""WebShopEnv through env.reset / env.step: prompts, oracle episodes, penalties, the 9-turn limit,
groups and determinism, the content split, the Hydra preset, bad configs, the user's WebShop data
files, and a ``trainer=smoke`` end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import tensordict

tensordict.set_list_to_stack(True).set()

import pytest  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

from ragen_torchrl.envs import make_env  # noqa: E402
from ragen_torchrl.envs.splits import VAL_SEED_OFFSET  # noqa: E402
from ragen_torchrl.envs.webshop import WebShopEnv, load_shop  # noqa: E402
from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR  # noqa: E402

CONFIG_DIR = Path(PACKAGE_CONFIG_DIR)
PENALTY = -0.1


def reset(env, seeds, groups=None) -> TensorDict:
    n = len(seeds)
    data = {"level_seed": torch.tensor(seeds), "group_id": torch.tensor(groups or [0] * n)}
    return env.reset(TensorDict(data, batch_size=[n]))


def step(env, td, replies) -> TensorDict:
    n = td.batch_size[0]
    msg = History(role=["assistant"] * n, content=list(replies), batch_size=(n,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    return env.step(td)["next"]


def last_user(td, row: int = 0) -> str:
    return td["history", "prompt"][row].content[-1]


def reply(action: str) -> str:
    return f"<think>x</think><answer>{action}</answer>"


@pytest.fixture(scope="module")
def env():
    return WebShopEnv(num_envs=1)


# --------------------------------------------------------------------------- episodes
def test_reset_prompt_lists_the_instruction_and_the_search_action(env):
    td = reset(env, [7])
    prompt = td["history", "prompt"][0]
    assert list(prompt.role) == ["system", "user"] and "search[" in prompt.content[0]
    goal = env.games[0].goal
    assert prompt.content[1] == f"Instruction: {goal.instruction}\nSearch page: search[<keywords>]"
    assert env.max_turn == env.max_actions_per_traj == 9 and env.max_actions_per_turn == 1


def test_oracle_episode_is_rewarded_only_on_the_purchase(env):
    td = reset(env, [11])
    rewards = []
    for _ in range(9):
        nxt = step(env, td, [env.format_reply("plan", [env.games[0].oracle_action()])])
        rewards.append(nxt["reward"].item())
        if nxt["done"].item():
            break
        td = nxt
    assert rewards[-1] == 1.0 and set(rewards[:-1]) == {0.0}
    assert nxt["terminated"].item() and not nxt["truncated"].item() and nxt["success"].item()
    assert env.games[0].score == 1.0 and "Your score" in last_user(nxt)


def test_buying_without_the_options_scores_below_one_and_gets_reward_zero(env):
    td = reset(env, [12])
    game = env.games[0]
    td = step(env, td, [reply(game.oracle_action())])  # search
    td = step(env, td, [reply(game.oracle_action())])  # open the item
    nxt = step(env, td, [reply("click[buy now]")])
    assert nxt["done"].item() and nxt["reward"].item() == 0.0 and not nxt["success"].item()
    assert 0.0 < game.score < 1.0


@pytest.mark.parametrize("bad", ["click[nothing here]", "search[x] extra", "buy now", "click[next >]"])
def test_unavailable_action_costs_the_penalty_and_changes_nothing(env, bad):
    td = reset(env, [13])
    before = env.games[0].render_text()
    nxt = step(env, td, [reply(bad)])
    assert nxt["reward"].item() == pytest.approx(PENALTY) and not nxt["action_is_valid"].item()
    assert not nxt["action_is_effective"].item() and not nxt["done"].item()
    assert env.games[0].render_text() == before and last_user(nxt).startswith("Invalid action")


@pytest.mark.parametrize(
    "bad", ["", "no tags", "<think>x</think>", "<answer>search[mug]</answer>", "<think>x</think><answer></answer>"]
)
def test_malformed_reply_gets_the_format_penalty(env, bad):
    td = reset(env, [14])
    before = env.games[0].render_text()
    nxt = step(env, td, [bad])
    assert nxt["reward"].item() == pytest.approx(PENALTY) and env.games[0].render_text() == before


def test_nine_turns_then_truncated(env):
    td = reset(env, [15])
    td = step(env, td, [reply(env.games[0].oracle_action())])
    for turn in range(2, 10):  # wander between the results pages
        action = "click[next >]" if env.games[0].page_no == 1 else "click[< prev]"
        td = step(env, td, [reply(action)])
        assert td["done"].item() == (turn == 9)
    assert td["truncated"].item() and not td["terminated"].item() and td["turn"].item() == 9


def test_group_shares_the_goal_and_runs_are_deterministic():
    runs = []
    for _ in range(2):
        env = WebShopEnv(num_envs=3)
        td = reset(env, [31, 31, 32], [0, 0, 1])
        nxt = step(env, td, [reply(g.oracle_action()) for g in env.games])
        runs.append([last_user(nxt, r) for r in range(3)])
    assert runs[0] == runs[1]
    assert runs[0][0] == runs[0][1] != runs[0][2]


def test_validation_goals_are_disjoint_from_training_goals(env):
    train = {g.instruction for g in env.goals["train"]}
    val = {g.instruction for g in env.goals["val"]}
    assert not train & val and 200 < len(val) < 400
    assert env.game_factory(VAL_SEED_OFFSET + 5, 0).goal.instruction in val
    assert env.game_factory(5, 0).goal.instruction in train
    assert env.game_factory(2 * VAL_SEED_OFFSET + 5, 0).goal.instruction in train  # demonstrations


def test_demonstrations_show_the_oracle_and_some_noise(env):
    from ragen_torchrl.trainer.demonstrations import make_demonstrations

    demos = make_demonstrations(env, 6, noise=0.3, seed=0)
    replies = [m["content"] for chat in demos for m in chat if m["role"] == "assistant"]
    assert all(r.startswith("<think>") and "</answer>" in r for r in replies)
    assert any("search[" in r for r in replies) and any("click[buy now]" in r for r in replies)
    clean = make_demonstrations(env, 5, noise=0.0, seed=1)
    assert all(chat[-1]["content"].endswith("<answer>click[buy now]</answer>") for chat in clean)
    assert all(len(chat) <= 2 + 2 * 9 - 1 for chat in clean)


# --------------------------------------------------------------------------- config
def test_hydra_preset_builds_the_env():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=["env=webshop"])
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg.env, resolve=True).items() if k != "name"}
    env = make_env(cfg.env.name, num_envs=2, **kwargs)
    assert isinstance(env, WebShopEnv) and env.max_turn == 9 and kwargs["reward_mode"] == "binary"
    assert kwargs["catalog_path"] is None and len(env.shop.products) == 3000


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"num_products": 0}, "num_products"),
        ({"reward_mode": "dense"}, "reward_mode"),
        ({"val_fraction": 1.5}, "val_fraction"),
        ({"attributes_path": "a.json"}, "catalog_path"),
        ({"catalog_path": 3}, "catalog_path"),
        ({"search_return_n": 0}, "search_return_n"),
        ({"catalog_seed": -1}, "catalog_seed"),
        ({"val_data_path": "v.json"}, "data_path"),
        ({"max_turn": 0}, "max_turn"),
        ({"observation": "html"}, "observation"),
    ],
)
def test_bad_config_raises_value_error_naming_the_key(cfg, match):
    with pytest.raises(ValueError, match=match):
        WebShopEnv(num_envs=1, **cfg)


def test_missing_bm25s_fails_at_construction_with_the_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(ImportError, match=r"pip install ragen_torchrl\[search\]"):
        WebShopEnv(num_envs=1)


# --------------------------------------------------------------------------- the user's WebShop files
PRODUCTS = [
    {
        "asin": "B0AAAAAAA1",
        "name": "Acme Linen Throw Pillow Cover",
        "pricing": "$12.99",
        "full_description": "A soft linen pillow cover.",
        "small_description": ["Hidden zipper", "Machine washable"],
        "customization_options": {"Color": [{"value": "Navy Blue"}, {"value": "Beige"}], "Size": [{"value": "18x18"}]},
        "category": "garden",
        "query": "pillow covers",
        "product_category": "Home › Decor › Pillows",
    },
    {
        "asin": "B0AAAAAAA2",
        "name": "Bolt Ceramic Coffee Mug",
        "pricing": "$8.50 to $11.50",
        "customization_options": {"Color": ["Red", "White/Black"]},
        "query": "coffee mugs",
        "product_category": "Home › Kitchen › Mugs",
    },
    {"asin": "nan", "name": "skipped as in WebShop"},
    {"asin": "B0AAAAAAA3", "name": "Cozy Velvet Pillow Cover", "pricing": "$20.00", "query": "pillow covers"},
]
ATTRIBUTES = {
    "B0AAAAAAA1": {
        "attributes": ["linen", "hidden zipper"],
        "instruction": "i want a linen pillow cover",
        "instruction_attributes": ["linen"],
    },
    "B0AAAAAAA2": {
        "attributes": ["ceramic", "dishwasher safe"],
        "instruction": "i need a ceramic coffee mug",
        "instruction_attributes": ["ceramic", "dishwasher safe"],
    },
    "B0AAAAAAA3": {"attributes": ["velvet"]},
}
HUMAN_GOALS = {
    "B0AAAAAAA1": [
        {
            "instruction": "i am looking for a linen pillow cover with hidden zipper in navy blue.",
            "instruction_attributes": ["linen", "hidden zipper"],
            "instruction_options": ["navy blue"],
        }
    ],
    "B0AAAAAAA2": [
        {
            "instruction": "i want a red ceramic mug",
            "instruction_attributes": ["ceramic"],
            "instruction_options": ["red"],
        }
    ],
    "B0AAAAAAA3": [{"instruction": "a velvet cover", "instruction_attributes": ["velvet"], "instruction_options": []}],
    "B0NOTINCAT": [{"instruction": "skipped", "instruction_attributes": ["x"], "instruction_options": []}],
}


def write(path: Path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def play_oracle(env: WebShopEnv, split: str) -> list[float]:
    scores = []
    for i, goal in enumerate(env.goals[split]):
        game = env.game_factory((VAL_SEED_OFFSET if split == "val" else 0) + i, 0)
        assert game.goal == goal
        for _ in range(9):
            game.step(game.oracle_action())
            if game.done:
                break
        scores.append(game.score)
    return scores


def test_webshop_files_load_and_the_oracle_buys_the_goals(tmp_path):
    catalog = write(tmp_path / "items_shuffle_1000.json", PRODUCTS)
    attrs = write(tmp_path / "items_ins_v2_1000.json", ATTRIBUTES)
    goals = write(tmp_path / "items_human_ins.json", HUMAN_GOALS)
    env = WebShopEnv(num_envs=1, catalog_path=catalog, attributes_path=attrs, data_path=goals, val_fraction=0.34)
    assert [p.asin for p in env.shop.products] == ["B0AAAAAAA1", "B0AAAAAAA2", "B0AAAAAAA3"]
    pillow, mug = env.shop.products[:2]
    assert pillow.options == {"color": ("navy blue", "beige"), "size": ("18x18",)} and pillow.price == 12.99
    assert pillow.attributes == ("linen", "hidden zipper") and pillow.bullets == ("Hidden zipper", "Machine washable")
    assert 8.5 <= mug.price <= 11.5 and mug.price_text == "$8.5 to $11.5" and mug.options["color"][1] == "white | black"
    all_goals = env.goals["train"] + env.goals["val"]
    assert len(all_goals) == 3 and len(env.goals["val"]) == 2
    assert all("price lower than" in g.instruction for g in all_goals)
    assert play_oracle(env, "train") + play_oracle(env, "val") == [1.0, 1.0, 1.0]


def test_synthetic_goals_from_the_attribute_file_and_goal_records(tmp_path):
    catalog = write(tmp_path / "items.json", PRODUCTS)
    attrs = write(tmp_path / "attrs.json", ATTRIBUTES)
    env = WebShopEnv(num_envs=1, catalog_path=catalog, attributes_path=attrs, val_fraction=0.0)
    goals = env.goals["train"]
    assert [g.asin for g in goals] == ["B0AAAAAAA1", "B0AAAAAAA2"]  # the velvet cover has no instruction
    assert goals[0].option_names == ("color", "size") and " with color: " in goals[0].instruction
    assert play_oracle(env, "train") == [1.0, 1.0]
    records = tmp_path / "goals.jsonl"
    records.write_text(
        json.dumps(
            {
                "asin": "B0AAAAAAA2",
                "instruction_text": "a white mug",
                "attributes": ["ceramic"],
                "goal_options": {"color": "white | black"},
                "price_upper": 5.0,
            }
        )
        + "\n"
    )
    env = WebShopEnv(num_envs=1, catalog_path=catalog, data_path=str(records), val_data_path=str(records))
    goal = env.goals["val"][0]
    assert goal.price_upper == 5.0 and goal.options == ("white | black",) and goal.instruction == "a white mug"


@pytest.mark.parametrize(
    "products, goals, match",
    [
        (None, None, r"missing\.json: file not found"),
        ([{"name": "no asin"}], None, r"record 1: missing or empty 'asin' or 'name'"),
        ([{"asin": "B1", "name": "x", "pricing": True}], None, r"record 1: 'pricing' must be"),
        ([{"asin": "B1", "name": "x", "customization_options": ["red"]}], None, "customization_options"),
        ("{not json", None, "invalid JSON"),
        (PRODUCTS, [{"asin": "B0AAAAAAA1"}], r"record 1: missing 'asin', 'instruction'"),
        (PRODUCTS, {"B0AAAAAAA1": "oops"}, r"key 'B0AAAAAAA1': expected a list"),
        (PRODUCTS, [{"asin": "B0OTHER", "instruction": "x", "instruction_attributes": ["a"]}], "no goal for a product"),
    ],
)
def test_data_file_errors_name_the_file_record_and_fields(tmp_path, products, goals, match):
    catalog = str(tmp_path / "missing.json")
    if isinstance(products, str):
        (tmp_path / "bad.json").write_text(products)
        catalog = str(tmp_path / "bad.json")
    elif products is not None:
        catalog = write(tmp_path / "items.json", products)
    data = write(tmp_path / "goals.json", goals) if goals is not None else write(tmp_path / "g.json", HUMAN_GOALS)
    with pytest.raises(ValueError, match=match):
        WebShopEnv(num_envs=1, catalog_path=catalog, data_path=data)


def test_catalogue_without_goals_needs_a_goal_source(tmp_path):
    catalog = write(tmp_path / "items.json", PRODUCTS)
    attrs = write(tmp_path / "attrs.json", {"B0AAAAAAA1": {"attributes": ["linen"]}})
    with pytest.raises(ValueError, match="pass a goal file as data_path"):
        WebShopEnv(num_envs=1, catalog_path=catalog, attributes_path=attrs)
    assert load_shop(num_products=50)[0] is load_shop(num_products=50)[0]  # cached


# --------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_webshop_trains_end_to_end_on_smoke(ragen_cache_dir, tmp_path):
    from helpers import TINY_RUN
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.loop import Trainer

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "env=webshop",
                "trainer=smoke",
                *TINY_RUN,
                f"model.cache_dir={ragen_cache_dir}",
                "env.num_products=300",
                "trainer.val_levels=2",
            ],
        )
    torch.manual_seed(0)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    summary = trainer.fit()
    assert summary["iterations"] == 2 and len(trainer.history) == 2
    assert (tmp_path / "run" / "checkpoints").is_dir()

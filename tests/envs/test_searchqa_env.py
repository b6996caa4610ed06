"""SearchQA through ``env.reset`` / ``env.step``: prompts, rewards, the format penalty, budgets,
groups, splits, the Hydra preset, data files, demonstrations and a ``trainer=smoke`` run."""

from __future__ import annotations

import json
from collections import OrderedDict

import pytest
import tensordict
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.games import retrieval
from ragen_torchrl.envs.games.searchqa_world import generate_world
from ragen_torchrl.envs.searchqa import SearchQAEnv
from ragen_torchrl.envs.splits import VAL_SEED_OFFSET
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.demonstrations import make_demonstrations

tensordict.set_list_to_stack(True).set()

PENALTY = -0.1
VAL = VAL_SEED_OFFSET


@pytest.fixture(autouse=True)
def private_ragen_cache(tmp_path, monkeypatch):
    """Envs built with the default ``cache_dir`` write their index here, not to the user's cache."""
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path / "ragen_cache"))


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def build(n: int = 1, cache_dir: str | None = None, **cfg) -> SearchQAEnv:
    return make_env("searchqa", num_envs=n, cache_dir=cache_dir, **cfg)


def reset(env, seeds, groups=None):
    n = len(seeds)
    return env.reset(
        TensorDict(level_seed=torch.tensor(seeds), group_id=torch.tensor(groups or [0] * n), batch_size=[n])
    )


def step(env, td, replies):
    n = td.batch_size[0]
    msg = History(role=["assistant"] * n, content=list(replies), batch_size=(n,))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    return env.step(td)["next"]


def oracle(env, row=0):
    game = env.games[row]
    action = game.oracle_action()
    return env.format_reply(game.explain(action), [action])


def last_user(td, row=0):
    return td["history", "prompt"][row].content[-1]


def two_hop_seed(env, start=0):
    return next(s for s in range(start, start + 500) if len(env.game_factory(s, 0).item.hops) == 2)


# --------------------------------------------------------------------------- contract
def test_reset_prompt_and_oracle_episode(cache):
    env = build(2, cache)
    seed = two_hop_seed(env)
    td = reset(env, [seed, seed])
    history = td["history", "prompt"][0]
    assert list(history.role) == ["system", "user"]
    assert "search[query]" in history.content[0] and "finish[answer]" in history.content[0]
    assert "the 5 best passages; you have 5 turns" in history.content[0]
    assert "the 3 best passages; you have 4 turns" in build(1, cache, top_k=3, max_turn=4).system_prompt
    question = env.games[0].question
    assert history.content[1] == f"Question: {question}\nActions: search[query] or finish[answer]."
    rewards = []
    for turn in range(3):  # two searches, then the answer
        nxt = step(env, td, [oracle(env, 0), oracle(env, 1)])
        rewards.append(nxt["reward"].flatten().tolist())
        assert nxt["action_is_valid"].all() and nxt["turn"].tolist() == [turn + 1] * 2
        if turn < 2:
            assert not nxt["done"].any() and last_user(nxt).startswith("Results for search[")
            assert nxt["action_is_effective"].all()
        td = nxt
    assert rewards == [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    assert nxt["done"].all() and nxt["terminated"].all() and not nxt["truncated"].any() and nxt["success"].all()
    assert nxt["progress"].tolist() == [0.0, 0.0]


def test_partial_credit_and_wrong_answer_through_the_env(cache):
    env = build(3, cache, max_hops=1)
    seed = next(s for s in range(500) if env.game_factory(s, 0).question.startswith("Who founded"))
    td = reset(env, [seed] * 3)
    full = env.games[0].answers[0]  # "First Last": one word of two has F1 2/3
    first = full.split()[0]
    nxt = step(env, td, [f"<think>x</think><answer>finish[{r}]</answer>" for r in (full, first, "Nobody")])
    assert nxt["reward"].flatten().tolist() == pytest.approx([1.0, 2 / 3, 0.0])
    assert nxt["success"].tolist() == [True, False, False] and nxt["terminated"].all()


MALFORMED = [
    "",
    "search[Telmora]",  # no tags
    "<think>x</think>",
    "<answer>search[Telmora]</answer>",  # no think block
    "<think>x</think><answer>Telmora</answer>",  # not an action
    "<think>x</think><answer>search[]</answer>",
    "<think>x</think><answer>search[a] || finish[b]</answer>",
    "<think>x</think><answer>lookup[Telmora]</answer>",
    "<think>" + "é∑😀" * 50,
]


def test_malformed_replies_get_the_penalty_and_change_nothing(cache):
    env = build(len(MALFORMED), cache)
    td = reset(env, [7] * len(MALFORMED))
    td = step(env, td, [env.format_reply("s", ["search[city country]"])] * len(MALFORMED))
    before = [g.render_text() for g in env.games]
    nxt = step(env, td, MALFORMED)
    assert nxt["reward"].flatten().tolist() == pytest.approx([PENALTY] * len(MALFORMED))
    assert not nxt["action_is_valid"].any() and not nxt["done"].any()
    assert [g.render_text() for g in env.games] == before
    assert all(g.searches == 1 for g in env.games)
    assert last_user(nxt).startswith("Invalid reply: use <answer>search[query]</answer>")
    assert before[0] in last_user(nxt)


def test_five_turns_without_an_answer_truncate(cache):
    env = build(1, cache)
    td = reset(env, [3])
    for turn in range(5):
        td = step(env, td, [env.format_reply("s", [f"search[query {turn}]"])])
    assert td["done"].item() and td["truncated"].item() and not td["terminated"].item()
    assert td["reward"].item() == 0.0 and not td["success"].item()


def test_primed_think_and_case_insensitive_action(cache):
    env = build(1, cache)
    td = reset(env, [3])
    answer = env.games[0].answers[0]
    nxt = step(env, td, [f"I know it.</think><answer> FINISH[ {answer} ] </answer>"])
    assert nxt["reward"].item() == 1.0 and nxt["success"].item()


def test_groups_share_the_question_and_runs_are_deterministic(cache):
    env = build(4, cache)
    reset(env, [11, 11, 12, 12], [0, 0, 1, 1])
    questions = [g.question for g in env.games]
    assert questions[0] == questions[1] and questions[2] == questions[3]
    again = build(4, cache)
    reset(again, [11, 11, 12, 12], [0, 0, 1, 1])
    assert [g.question for g in again.games] == questions


def test_validation_questions_are_disjoint_from_training_questions(cache):
    env = build(1, cache)
    train = {q.question for q in env.questions["train"]}
    val = {q.question for q in env.questions["val"]}
    assert not train & val and len(train) + len(val) == 480 and len(val) == 48  # ceil(0.1 * 480)
    seen_val = {env.game_factory(VAL + s, 0).question for s in range(200)}
    seen_train = {env.game_factory(s, 0).question for s in range(200)}
    seen_demo = {env.game_factory(2**31 + s, 0).question for s in range(200)}
    assert seen_val <= val and seen_train <= train and seen_demo <= train


def test_one_hop_preset_variant(cache):
    env = build(1, cache, max_hops=1)
    assert all(len(q.hops) == 1 for pool in env.questions.values() for q in pool)


# --------------------------------------------------------------------------- config
def test_hydra_preset_builds_the_env():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["env=searchqa"])
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg.env, resolve=True).items() if k != "name"}
    assert cfg.env.name == "searchqa" and kwargs["max_turn"] == 5 and kwargs["top_k"] == 5
    assert kwargs["data_path"] is None and kwargs["f1_threshold"] == 0.3 and kwargs["max_actions_per_turn"] == 1
    env = make_env(cfg.env.name, num_envs=2, **kwargs)
    assert env.max_turn == 5 and env.max_actions_per_traj == 5


@pytest.mark.parametrize(
    "cfg,name",
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": 51}, "top_k"),
        ({"max_hops": 3}, "max_hops"),
        ({"passage_chars": 5}, "passage_chars"),
        ({"f1_threshold": 1.5}, "f1_threshold"),
        ({"world_seed": -1}, "world_seed"),
        ({"world_seed": True}, "world_seed"),
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"limit": 0}, "limit"),
        ({"cache_dir": 3}, "cache_dir"),
        ({"max_turn": 0}, "max_turn"),
        ({"data_path": "q.jsonl"}, "corpus_path"),
        ({"corpus_path": "c.jsonl"}, "data_path"),
        ({"val_data_path": "v.jsonl"}, "data_path"),
    ],
)
def test_bad_config_values_are_named(cfg, name):
    with pytest.raises(ValueError, match=name):
        make_env("searchqa", num_envs=1, **cfg)


# --------------------------------------------------------------------------- data files
def write_world(tmp_path, seed=0):
    world = generate_world(seed)
    questions = tmp_path / "questions.jsonl"
    corpus = tmp_path / "corpus.jsonl"
    questions.write_text(
        "".join(json.dumps({"question": q.question, "answers": list(q.answers)}) + "\n" for q in world.questions)
    )
    corpus.write_text("".join(json.dumps(p._asdict()) + "\n" for p in world.passages))
    return world, questions, corpus


def test_user_files_load_split_and_play(tmp_path, cache):
    world, questions, corpus = write_world(tmp_path)
    env = build(1, cache, data_path=str(questions), corpus_path=str(corpus), val_fraction=0.2)
    assert len(env.questions["val"]) == 96 and len(env.questions["train"]) == 384
    assert not {q.question for q in env.questions["val"]} & {q.question for q in env.questions["train"]}
    # the same questions as the generated world's, so the same content split at the same fraction
    generated = build(1, cache, val_fraction=0.2)
    assert {q.question for q in env.questions["val"]} == {q.question for q in generated.questions["val"]}
    # without a hop chain the oracle searches the question, then answers
    td = reset(env, [5])
    assert env.games[0].oracle_action() == f"search[{env.games[0].question}]"
    td = step(env, td, [oracle(env)])
    td = step(env, td, [oracle(env)])
    assert td["reward"].item() == 1.0 and td["success"].item()


def test_separate_validation_file(tmp_path, cache):
    _, questions, corpus = write_world(tmp_path)
    val = tmp_path / "val.jsonl"
    val.write_text(json.dumps({"question": "Held out?", "answer": "yes"}) + "\n")
    env = build(1, cache, data_path=str(questions), corpus_path=str(corpus), val_data_path=str(val))
    assert [q.question for q in env.questions["val"]] == ["Held out?"] and len(env.questions["train"]) == 480


def test_missing_or_malformed_files_name_file_and_field(tmp_path, cache):
    _, questions, corpus = write_world(tmp_path)
    with pytest.raises(ValueError, match="missing.jsonl: file not found"):
        build(1, cache, data_path=str(tmp_path / "missing.jsonl"), corpus_path=str(corpus))
    bad = tmp_path / "bad_corpus.jsonl"
    bad.write_text(json.dumps({"id": "x", "title": "T"}) + "\n")
    with pytest.raises(ValueError, match=r"bad_corpus.jsonl, line 1: field 'text'"):
        build(1, cache, data_path=str(questions), corpus_path=str(bad))


def test_index_is_loaded_from_the_disk_cache_by_a_new_process(cache, monkeypatch):
    monkeypatch.setattr(retrieval, "_MEMO", OrderedDict())
    assert build(1, cache).retriever.source == "built"
    monkeypatch.setattr(retrieval, "_MEMO", OrderedDict())
    env = build(1, cache)
    assert env.retriever.source == "disk" and str(env.retriever.cache_path).startswith(cache)


# --------------------------------------------------------------------------- demonstrations
def test_demonstrations_are_valid_replies_and_mostly_succeed(cache):
    env = build(1, cache)
    demos = make_demonstrations(env, num_episodes=40, noise=0.0, seed=0)
    for chat in demos:
        replies = [m["content"] for m in chat if m["role"] == "assistant"]
        assert replies[-1].startswith("<think>") and "<answer>finish[" in replies[-1]
        assert all("<answer>search[" in r for r in replies[:-1]) and 2 <= len(replies) <= 3
    noisy = make_demonstrations(env, num_episodes=40, noise=0.5, seed=1)
    assert noisy != demos and all(len([m for m in c if m["role"] == "assistant"]) <= 5 for c in noisy)
    # demonstration levels are training questions, and the noiseless ones answer them right
    gold = {q.question: q.answers[0] for q in env.questions["train"]}
    for chat in demos:
        question = chat[1]["content"].split("\n")[0][len("Question: ") :]
        assert chat[-1]["content"].endswith(f"<answer>finish[{gold[question]}]</answer>")


# --------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_searchqa_trains_end_to_end_on_smoke(ragen_cache_dir, tmp_path, monkeypatch):
    from ragen_torchrl.trainer.loop import Trainer

    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path / "bm25_cache"))
    monkeypatch.setattr(retrieval, "_MEMO", OrderedDict())  # as in a fresh process
    # trainer=smoke's own warm start (20 x 4 steps; the global 500 x 16 would take an hour on
    # SearchQA's conversations); only the model is shrunk
    tiny_model = [o for o in TINY_RUN if not o.startswith("sft.")]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "config", overrides=["env=searchqa", "trainer=smoke", *tiny_model, f"model.cache_dir={ragen_cache_dir}"]
        )
    assert (cfg.sft.steps, cfg.sft.batch_size, cfg.sft.episodes) == (20, 4, 100)
    torch.manual_seed(0)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    summary = trainer.fit()
    assert summary["iterations"] == 2 and len(trainer.history) == 2
    for stats in trainer.history:
        assert stats["rollout/num_trajectories"] == 4.0
    assert (tmp_path / "run" / "checkpoints").is_dir()
    assert (tmp_path / "bm25_cache" / "bm25").is_dir()  # the index went to $RAGEN_CACHE

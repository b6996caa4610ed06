"""The key contract in the package: ``ragen_torchrl.keys``.

* ``KEY_TABLE`` names every key an env step (plain and T3), a trajectory record batch and a
  training batch (GRPO and PPO) actually hold, once, and each group's keys are really there;
* ``docs/tensordict_contract.md`` carries the table generated from ``KEY_TABLE``;
* ``PPOLoss`` exposes its critic keys through ``_AcceptedKeys``: ``set_keys`` renames them end
  to end (``PPOAlgorithm.prepare`` writes the renamed keys and the loss reads them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tensordict
import torch
from torchrl.data.llm import History

from ragen_torchrl import keys as K
from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.objectives.algorithm import PPOAlgorithm
from ragen_torchrl.objectives.logprobs import attach_training_data, compute_behaviour_log_probs, make_logprob_policy
from ragen_torchrl.objectives.ppo import Critic, PPOLoss, prepare_ppo_batch
from ragen_torchrl.transforms.advantage import GroupAdvantage
from ragen_torchrl.transforms.t3 import T3Truncation

DOC = Path(__file__).resolve().parents[1] / "docs" / "tensordict_contract.md"
TABLE_KEYS = {info.key for info in K.KEY_TABLE}
#: module constants that are collections of keys, not keys
KEY_SETS = {"GROUPS", "LEVEL_KEYS", "T3_KEYS", "KV_COUNT_KEYS", "KEY_TABLE"}


def _constants() -> dict[str, object]:
    return {n: v for n, v in vars(K).items() if n.isupper() and n not in KEY_SETS and not n.startswith("_")}


def _reply(td, texts):
    rows = []
    for h, text in zip(td.get(K.HISTORY_PROMPT).unbind(0), texts):
        rows.append(h.extend(History(role="assistant", content=text, batch_size=(1,)), inplace=False, dim=-1))
    td.set(K.HISTORY_FULL, tensordict.lazy_stack(rows))
    return td


def _t(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


NESTED = [_t(k) for k in TABLE_KEYS if isinstance(k, tuple)]


def _contract_keys(td) -> set:
    """The keys of ``td`` as the contract names them: ``("next", k)`` -> ``k``; intermediate
    nodes (``"history"``, ``"masks"``) and the fields inside a ``History`` are not keys of their own."""
    found = set()
    for key in td.keys(include_nested=True):
        key = _t(key)
        if key[0] == "next":
            key = key[1:]
        if not key:
            continue
        name = key[0] if len(key) == 1 else key
        if name not in TABLE_KEYS:
            if any(len(t) > len(key) and t[: len(key)] == key for t in NESTED):
                continue  # an intermediate node of a nested key
            if any(len(key) > len(t) and key[: len(t)] == t for t in NESTED):
                continue  # a field inside a History (role, content, ...)
        found.add(name)
    return found


# ---------------------------------------------------------------------------- the table itself
def test_key_table_has_no_duplicates_and_every_constant():
    keys = [info.key for info in K.KEY_TABLE]
    assert len(keys) == len(set(keys)), "a key appears twice in KEY_TABLE"
    constants = _constants()
    values = [v for v in constants.values() if isinstance(v, (str, tuple))]
    assert len(values) == len(set(values)), "two constants name the same key"
    assert set(values) == TABLE_KEYS, "constants and KEY_TABLE differ"
    for info in K.KEY_TABLE:
        assert info.groups and set(info.groups) <= set(K.GROUPS), info
        assert info.dtype and info.shape and info.meaning, info
    assert set(K.LEVEL_KEYS) <= TABLE_KEYS and set(K.T3_KEYS) <= TABLE_KEYS
    assert K.key_info(K.EPISODE_RETURN).groups == ("record",)
    with pytest.raises(KeyError, match="not a key of the contract"):
        K.key_info("no_such_key")
    with pytest.raises(ValueError, match="group must be one of"):
        K.keys_in("nowhere")


def test_doc_carries_the_generated_table():
    doc = DOC.read_text()
    assert "ragen_torchrl/keys.py" in doc
    assert K.markdown_table() in doc, "docs/tensordict_contract.md: paste `python -m ragen_torchrl.keys`"
    for info in K.KEY_TABLE:
        assert f"`{K.format_key(info.key)}`" in doc, info.key


# ---------------------------------------------------------------------------- env steps
@pytest.mark.parametrize("t3", [False, True], ids=["plain", "t3"])
def test_env_reset_and_step_hold_only_table_keys(t3):
    env = make_env("guess_numbers" if t3 else "frozenlake", num_envs=2)
    if t3:
        env = env.append_transform(T3Truncation("guess_numbers"))
    env.set_seed(0)
    td = env.reset()
    reset_keys = _contract_keys(td)
    out = env.step(_reply(td, ["<think>x</think><answer>Left</answer>", "nonsense"]))
    step_keys = _contract_keys(out)
    seen = reset_keys | step_keys
    assert seen <= TABLE_KEYS, f"keys missing from KEY_TABLE: {seen - TABLE_KEYS}"
    expected = set(K.keys_in("env")) - {K.RESET}
    if t3:
        expected |= set(K.keys_in("t3"))
    assert expected <= seen, f"KEY_TABLE keys an env step does not hold: {expected - seen}"
    assert K.T3_KEYS[0] in seen if t3 else not (set(K.keys_in("t3")) & seen)


# ---------------------------------------------------------------------------- records and training batches
@pytest.fixture(scope="module")
def model_tok(tiny_model_dir):
    from helpers import load_tiny

    return load_tiny(tiny_model_dir)


@pytest.fixture(scope="module")
def records(model_tok):
    model, tok = model_tok
    env = make_env("frozenlake", num_envs=4, max_turn=2)
    policy = make_generation_policy(model, tok, max_new_tokens=4, temperature=1.0)
    torch.manual_seed(0)
    recs = collect_rollouts(env, policy, [3, 5], 2)
    recs.set(K.EPISODE_RETURN, torch.tensor([1.0, 0.0, 0.5, -0.5]))  # varied returns: non-zero advantages
    return recs


@pytest.fixture(scope="module")
def train_batch(model_tok, records):
    model, tok = model_tok
    batch = GroupAdvantage()(records.copy())
    actor = make_logprob_policy(model, tok)
    return actor, attach_training_data(batch, compute_behaviour_log_probs(actor, batch))


def test_record_batch_holds_exactly_the_record_keys(records):
    seen = _contract_keys(records)
    assert seen <= TABLE_KEYS, seen - TABLE_KEYS
    assert seen == set(K.keys_in("record")), seen ^ set(K.keys_in("record"))


def test_training_batch_holds_only_table_keys(model_tok, train_batch):
    model, _ = model_tok
    _, batch = train_batch
    seen = _contract_keys(batch)
    assert seen <= TABLE_KEYS, seen - TABLE_KEYS
    # PPO's and the KL term's keys come with their own preparation (below / kl_coeff > 0)
    expected = set(K.keys_in("train")) - {K.REF_LOG_PROBS_FULL, K.STATE_VALUE, K.VALUE_TARGET}
    assert expected <= seen, expected - seen
    ppo, _ = prepare_ppo_batch(batch.clone(), Critic(model.config.hidden_size, backbone=model.base_model))
    seen = _contract_keys(ppo)
    assert seen <= TABLE_KEYS and {K.STATE_VALUE, K.VALUE_TARGET, K.ADVANTAGE} <= seen


# ---------------------------------------------------------------------------- PPO's keys through set_keys
def test_ppo_critic_keys_are_accepted_keys_with_the_contract_defaults(model_tok, train_batch):
    model, _ = model_tok
    actor, _ = train_batch
    loss = PPOLoss(actor, Critic(model.config.hidden_size, backbone=model.base_model))
    fields = PPOLoss._AcceptedKeys.__dataclass_fields__
    assert {"value", "value_target", "episode_return", "advantage", "action", "ref_log_probs"} <= set(fields)
    tk = loss.tensor_keys
    assert (tk.value, tk.value_target, tk.episode_return) == (K.STATE_VALUE, K.VALUE_TARGET, K.EPISODE_RETURN)
    assert (tk.advantage, tk.action, tk.ref_log_probs) == (K.ADVANTAGE, K.TOKENS_FULL, K.REF_LOG_PROBS_FULL)
    with pytest.raises(ValueError, match="not an accepted tensordict key"):
        loss.set_keys(no_such_key="x")


def test_ppo_set_keys_renames_the_value_keys_end_to_end(model_tok, train_batch):
    model, _ = model_tok
    actor, batch = train_batch
    torch.manual_seed(0)
    critic = Critic(model.config.hidden_size, backbone=model.base_model)
    with torch.no_grad():
        critic.head.weight.normal_(0, 0.1)  # non-zero values, so clipping against old values matters
    loss = PPOLoss(actor, critic, value_clip=0.01)
    loss.set_keys(value="old_v", value_target="v_tgt", advantage="adv_tok", episode_return="ret")
    objective = PPOAlgorithm("ppo", loss, model, critic_lr=1e-4, gae={})
    renamed = batch.clone().exclude(K.ADVANTAGE)  # PPO's advantage is its GAE, written by prepare
    renamed.rename_key_(K.EPISODE_RETURN, "ret")
    renamed, _ = objective.prepare(renamed)  # writes the keys the loss was told to read
    present = set(renamed.keys(True))
    assert {"old_v", "v_tgt", "adv_tok"} <= present
    assert not {K.STATE_VALUE, K.VALUE_TARGET, K.ADVANTAGE, K.EPISODE_RETURN} & present
    out = loss(renamed)
    assert torch.isfinite(out.loss_critic).all() and torch.isfinite(out.loss_objective).all()
    # the loss reads the renamed old values: moving them moves the clipped value loss
    shifted = tensordict.lazy_stack([row.set("old_v", row.get("old_v") + 5.0) for row in renamed.clone().unbind(0)])
    assert loss(shifted).loss_critic.item() != pytest.approx(out.loss_critic.item())
    # a loss with the default names does not find them in the renamed batch
    default = PPOLoss(actor, critic)
    with pytest.raises(KeyError, match="state_value|advantage"):
        default(renamed)
    # and set_keys(value=None) restores the contract's default
    loss.set_keys(value=None)
    assert loss.tensor_keys.value == K.STATE_VALUE

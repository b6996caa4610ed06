"""The rollout-policy protocol: every policy of the project declares it, and a policy that lacks a member
its mode needs is refused by ``collect_rollouts`` with a ``PolicyContractError`` naming the member, before
the env is reset or the policy is called."""

from __future__ import annotations

import inspect
from types import SimpleNamespace as NS

import pytest
import tensordict
import torch
from tensordict import TensorDictBase

from ragen_torchrl import keys as K
from ragen_torchrl.collectors import (
    HFRolloutPolicy,
    PolicyContractError,
    RolloutPolicy,
    TokenPromptPolicy,
    TokenPromptWrapper,
    TrajectoryOwner,
    VLLMTokenPolicy,
    VLRolloutPolicy,
    as_rollout_policy,
    collect_rollouts,
    make_generation_policy,
    protocol_members,
)
from ragen_torchrl.collectors.policy_protocol import EntropyRecording
from ragen_torchrl.collectors.vllm_backend import _RolloutvLLMWrapper
from ragen_torchrl.envs import make_env
from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
from ragen_torchrl.models.turn_cache import TurnCachePolicy

PROTOCOLS = (RolloutPolicy, TokenPromptPolicy, TrajectoryOwner)


def _declared(protocol) -> set[str]:
    """The members a protocol class itself declares: its annotations and the methods it defines."""
    own = {name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")}
    return (
        set(vars(protocol).get("__annotations__", {})) | own | ({"__call__"} if "__call__" in vars(protocol) else set())
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_member_lists_are_the_protocols_members(protocol):
    assert set(protocol_members(protocol)) == _declared(protocol)


@pytest.mark.parametrize(
    "kwargs, kind",
    [
        ({"trajectory": "tokens", "kv_cache": True}, TokenPromptWrapper),
        ({"trajectory": "tokens", "kv_cache": False}, TokenPromptWrapper),
        ({"trajectory": "history"}, HFRolloutPolicy),
    ],
)
def test_the_hf_policies_declare_the_protocol(tiny_model, kwargs, kind):
    model, tok = tiny_model
    policy = make_generation_policy(model, tok, max_new_tokens=4, **kwargs)
    assert type(policy) is kind and RolloutPolicy in type(policy).__mro__
    assert isinstance(policy, RolloutPolicy) and isinstance(policy.entropy_recorder, EntropyRecording)
    assert not policy.owns_trajectories and not isinstance(policy, TrajectoryOwner)
    # the history one has a tokenizer too, but does not declare the token-prompt protocol
    assert (TokenPromptPolicy in type(policy).__mro__) == (kwargs["trajectory"] == "tokens")
    assert isinstance(policy, TokenPromptPolicy)
    # the turn-cache path is the token policy's: clear and release reach its TurnCachePolicy
    assert isinstance(policy.turn_cache, TurnCachePolicy) == bool(kwargs.get("kv_cache"))
    assert as_rollout_policy(policy) is policy


def test_the_vl_policy_declares_the_protocol(tmp_path):
    path = build_tiny_vl_model(
        ["The board is in the image."] * 20,
        TinyVLConfig(vocab_size=300, hidden_size=32, num_layers=1, vision_depth=1),
        str(tmp_path),
    )
    model, processor = load_tiny_vl(path)
    policy = VLRolloutPolicy(model, processor, max_new_tokens=2)
    assert isinstance(policy, RolloutPolicy) and isinstance(policy, TrajectoryOwner)
    assert policy.owns_trajectories and policy.input_mode == "vl" and TokenPromptPolicy not in type(policy).__mro__
    assert isinstance(policy.entropy_recorder, EntropyRecording)
    assert as_rollout_policy(policy) is policy


def test_the_vllm_policies_declare_the_protocol(tiny_model):
    _, tok = tiny_model
    token = VLLMTokenPolicy(NS(), tok, sampling_params=None, stop_ids={tok.eos_token_id})
    assert isinstance(token, TokenPromptPolicy) and isinstance(token, TrajectoryOwner)
    assert token.entropy_recorder is None and as_rollout_policy(token) is token
    # the history-mode wrapper needs a real engine to build: its instance as torchrl's constructor leaves it
    assert RolloutPolicy in _RolloutvLLMWrapper.__mro__
    wrapper = _RolloutvLLMWrapper.__new__(_RolloutvLLMWrapper)
    torch.nn.Module.__init__(wrapper)
    wrapper.input_mode, wrapper.tokenizer = "history", tok
    assert isinstance(wrapper, RolloutPolicy) and not wrapper.owns_trajectories and wrapper.entropy_recorder is None
    wrapper.clear()
    wrapper.release([0])  # the protocol's no-ops: the engine keeps no per-row state
    assert as_rollout_policy(wrapper) is wrapper


def test_a_plain_callable_takes_the_defaults():
    def scripted(td):
        return td

    view = as_rollout_policy(scripted)
    assert isinstance(view, RolloutPolicy) and not isinstance(view, TokenPromptPolicy)
    assert (view.input_mode, view.entropy_recorder, view.owns_trajectories) == ("history", None, False)
    view.clear()
    view.release([0, 1])
    scripted.input_mode, scripted.tokenizer = "tokens", object()
    view = as_rollout_policy(scripted)
    assert isinstance(view, TokenPromptPolicy) and (view.reply_prime, view.chat_template) == ("", None)


class _Never:
    """An env stand-in that fails if the collector reaches it."""

    batch_size = torch.Size([2])

    def reset(self, *args, **kwargs):
        raise AssertionError("the env was reset before the policy was checked")


def _never_called(td):
    raise AssertionError("the policy was called")


class _DeclaredWithoutRecorder(RolloutPolicy):
    input_mode, owns_trajectories = "history", False

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        return _never_called(td)


class _DeclaredWithDataClear(RolloutPolicy):
    input_mode, owns_trajectories, entropy_recorder, clear = "history", False, None, "not a method"

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        return _never_called(td)


def _plain(**members):
    def policy(td):
        return _never_called(td)

    for name, value in members.items():
        setattr(policy, name, value)
    return policy


@pytest.mark.parametrize(
    "policy, message",
    [
        (
            _plain(input_mode="tokens"),
            r"token-prompt policy \(input_mode='tokens'\) without tokenizer.*TokenPromptPolicy",
        ),
        (_plain(owns_trajectories=True), r"owns its trajectories \(owns_trajectories=True\) without trajectory"),
        (_plain(owns_trajectories=True, trajectory=3), r"function\.trajectory is not callable"),
        (_plain(entropy_recorder=[]), r"entropy_recorder is a list, not an EntropyRecording"),
        (_DeclaredWithoutRecorder(), r"_DeclaredWithoutRecorder is a RolloutPolicy without entropy_recorder"),
        (_DeclaredWithDataClear(), r"_DeclaredWithDataClear\.clear is not callable"),
        ("Right", r"must be callable.*got str"),
    ],
)
def test_collect_rollouts_names_the_missing_member(policy, message):
    with pytest.raises(PolicyContractError, match=message):
        collect_rollouts(_Never(), policy, [1], 2)


def test_a_checked_policy_collects_as_before(tiny_model):
    # the same policy handed over as it is and behind a forwarding object that declares nothing
    model, tok = tiny_model
    policy = make_generation_policy(model, tok, max_new_tokens=4, temperature=1.0)

    class Forwarding:
        def __getattr__(self, name):
            return getattr(policy, name)

        def __call__(self, td):
            return policy(td)

    with tensordict.set_list_to_stack(True):
        runs = []
        for p in (policy, Forwarding()):
            torch.manual_seed(0)
            runs.append(collect_rollouts(make_env("frozenlake", num_envs=4, max_turn=2), p, [3, 5], 2))
    for key in (K.EPISODE_RETURN, K.NUM_TOKENS, K.ENTROPY, K.TRAJECTORY_REFITS):
        assert torch.equal(runs[0].get(key), runs[1].get(key))
    for a, b in zip(runs[0].tensordicts, runs[1].tensordicts, strict=True):
        assert torch.equal(a.get(K.TOKENS_TRAJECTORY), b.get(K.TOKENS_TRAJECTORY))

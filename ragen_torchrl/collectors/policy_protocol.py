"""What :func:`~ragen_torchrl.collectors.collect_rollouts` asks of a rollout policy.

Every member the collector calls or reads is declared here, in three protocols:

* :class:`RolloutPolicy`, every policy: called on the running rows, it says how it reads them
  (``input_mode``), whether it records entropy (``entropy_recorder``) and keeps whole trajectories
  (``owns_trajectories``), and frees per-row state (``clear``, ``release``);
* :class:`TokenPromptPolicy`, a policy with ``input_mode == "tokens"``: the collector keeps each row's
  trajectory as token ids (:mod:`~ragen_torchrl.collectors.token_trajectory`) and renders it with the
  policy's ``tokenizer``, ``chat_template`` and ``reply_prime``;
* :class:`TrajectoryOwner`, a policy with ``owns_trajectories``: it hands over each finished row's
  record entries (``trajectory(env_index)``).

The project's policies subclass them (the ``hf`` policies of
:func:`~ragen_torchrl.collectors.make_generation_policy`, their turn-cache path included, the vLLM ones
and :class:`~ragen_torchrl.collectors.vl_policy.VLRolloutPolicy`); an explicit subclass inherits the
no-op ``clear`` and ``release``. Any other callable (a scripted policy, torchrl's own wrappers) is read
with the defaults :func:`as_rollout_policy` names. What a policy must *write* is checked after each
call (:func:`check_policy_output`).

Example:
    >>> def scripted(td):  # a plain callable: every member takes its default
    ...     return td
    >>> policy = as_rollout_policy(scripted)
    >>> isinstance(policy, RolloutPolicy), policy.input_mode, policy.entropy_recorder, policy.owns_trajectories
    (True, 'history', None, False)
    >>> scripted.input_mode = "tokens"  # a token-prompt policy needs the tokenizer its prompts are rendered with
    >>> try:
    ...     as_rollout_policy(scripted)
    ... except PolicyContractError as e:
    ...     print(str(e).split(":")[0])
    function is a token-prompt policy (input_mode='tokens') without tokenizer
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase

from ..keys import HISTORY_FULL, TOKENS_RESPONSE

__all__ = [
    "POLICY_OUTPUT_KEYS",
    "PolicyContractError",
    "EntropyRecording",
    "RolloutPolicy",
    "TOKEN_POLICY_OUTPUT_KEYS",
    "TokenPromptPolicy",
    "TrajectoryOwner",
    "as_rollout_policy",
    "check_policy_output",
    "protocol_members",
]

#: keys a policy must write (see :mod:`~ragen_torchrl.collectors.grouped`'s policy contract)
POLICY_OUTPUT_KEYS: tuple[tuple[str, str], ...] = (HISTORY_FULL, TOKENS_RESPONSE)
#: keys a token-prompt policy must write (the collector writes ``("history", "full")`` itself)
TOKEN_POLICY_OUTPUT_KEYS: tuple[tuple[str, str], ...] = (TOKENS_RESPONSE,)


class PolicyContractError(ValueError):
    """A policy breaks :func:`~ragen_torchrl.collectors.collect_rollouts`' policy contract (names what is missing)."""


@runtime_checkable
class EntropyRecording(Protocol):
    """A policy's per-row entropy of its last call (:class:`~ragen_torchrl.models.entropy_recorder.EntropyRecorder`)."""

    def clear(self) -> None:
        """Forget the previous call (the collector calls it before each policy call)."""

    @property
    def num_steps(self) -> int:
        """Decoding steps recorded by the last call (0: nothing recorded, the rows' entropy is left out)."""

    def row_sums(self, lengths: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sums, counts)``: each row's entropy summed over its first ``lengths[i]`` sampled tokens, and the count."""


@runtime_checkable
class RolloutPolicy(Protocol):
    """What :func:`~ragen_torchrl.collectors.collect_rollouts` calls and reads on every policy.

    ``policy(td)`` is called on a TensorDict of the ``n`` running rows (at most ``chunk_size``) and
    returns a TensorDict of the same ``n`` rows (the contract's output keys:
    :func:`check_policy_output`).
    """

    #: ``"tokens"``: a :class:`TokenPromptPolicy` (it reads ``("tokens", "prompt")``, the collector
    #: keeps the token trajectories); anything else (``"history"``, ``"vl"``): it reads the
    #: conversation at ``("history", "prompt")`` and writes ``("history", "full")``
    input_mode: str
    #: fills the records' ``entropy`` column (``None``: not recorded, the column is 0)
    entropy_recorder: EntropyRecording | None
    #: ``True``: a :class:`TrajectoryOwner`, whose finished rows' entries go into their records
    owns_trajectories: bool

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The running rows' replies (see the collector's policy contract)."""

    def clear(self) -> None:
        """Forget every row's state: a collection starts (before the first call)."""

    def release(self, env_indices: list[int]) -> None:
        """Forget the state of these ``env_index`` rows: their episodes ended (and were read)."""


@runtime_checkable
class TokenPromptPolicy(RolloutPolicy, Protocol):
    """A :class:`RolloutPolicy` with ``input_mode == "tokens"``: it reads each row's trajectory as ids.

    It is called with the per-row keys plus ``("tokens", "prompt")`` (the row's trajectory so far,
    a 1-D long tensor per row) and no conversation, and writes only ``("tokens", "response")``.
    """

    #: renders the first prompts and env turns, decodes the replies
    tokenizer: Any
    #: the text every prompt ends with (``"<think>"`` under ``rollout.prime_think``; ``""``: none)
    reply_prime: str
    #: the (primed) template the trajectories are rendered with (``None``: the tokenizer's own, primed)
    chat_template: str | None


@runtime_checkable
class TrajectoryOwner(RolloutPolicy, Protocol):
    """A :class:`RolloutPolicy` with ``owns_trajectories``: it keeps each row's trajectory itself."""

    def trajectory(self, env_index: int) -> dict:
        """The record entries of the row's episode (``{key: tensor}``), read before :meth:`release`."""


#: the members of each protocol, in the order the errors name them
_MEMBERS = {
    RolloutPolicy: ("__call__", "input_mode", "entropy_recorder", "owns_trajectories", "clear", "release"),
    TokenPromptPolicy: ("tokenizer", "reply_prime", "chat_template"),
    TrajectoryOwner: ("trajectory",),
}
_CALLABLE = {"__call__", "clear", "release", "trajectory"}


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The members ``protocol`` adds to what it extends.

    Example:
        >>> protocol_members(TrajectoryOwner)
        ('trajectory',)
    """
    return _MEMBERS[protocol]


class _PlainPolicy:
    """A callable that does not declare :class:`RolloutPolicy`, read with its defaults: the members it
    has, else ``input_mode="history"``, no entropy recorder, no owned trajectories, no per-row state,
    no reply prime and the tokenizer's own template."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.input_mode = getattr(policy, "input_mode", None) or "history"
        self.entropy_recorder = getattr(policy, "entropy_recorder", None)
        self.owns_trajectories = bool(getattr(policy, "owns_trajectories", False))
        self.reply_prime = getattr(policy, "reply_prime", "") or ""
        self.chat_template = getattr(policy, "chat_template", None)
        for name in ("tokenizer", "trajectory"):  # no default: required where the mode needs them
            if hasattr(policy, name):
                setattr(self, name, getattr(policy, name))
        self._clear = getattr(policy, "clear", None)
        self._release = getattr(policy, "release", None)

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.policy(tensordict)

    def clear(self) -> None:
        if callable(self._clear):
            self._clear()

    def release(self, env_indices: list[int]) -> None:
        if callable(self._release):
            self._release(env_indices)


def _check_members(policy, protocol: type, name: str, why: str) -> None:
    for member in _MEMBERS[protocol]:
        if not hasattr(policy, member):
            raise PolicyContractError(
                f"{name} {why} without {member}: a {protocol.__name__} has "
                f"{', '.join(_MEMBERS[protocol])} (ragen_torchrl.collectors.policy_protocol)"
            )
        if member in _CALLABLE and not callable(getattr(policy, member)):
            raise PolicyContractError(f"{name}.{member} is not callable ({protocol.__name__} calls it)")


def as_rollout_policy(policy) -> RolloutPolicy:
    """``policy`` as :func:`~ragen_torchrl.collectors.collect_rollouts` reads it, each member checked.

    A policy whose class subclasses :class:`RolloutPolicy` is returned as it is and must have every
    member; any other callable is read with the members it has and these defaults for the rest:
    ``input_mode="history"``, ``entropy_recorder=None``, ``owns_trajectories=False``, ``clear`` and
    ``release`` doing nothing, ``reply_prime=""``, ``chat_template=None``. Either way a token-prompt
    policy (``input_mode == "tokens"``) must have a ``tokenizer`` and a trajectory owner a
    ``trajectory`` method.

    Raises:
        PolicyContractError: ``policy`` is not callable, or lacks a member its mode needs (names it and the protocol).

    Example:
        >>> class Declared(RolloutPolicy):  # declares the protocol but forgets its recorder
        ...     input_mode, owns_trajectories = "history", False
        ...     def __call__(self, td):
        ...         return td
        >>> try:
        ...     as_rollout_policy(Declared())
        ... except PolicyContractError as e:
        ...     print(str(e).split(":")[0])
        Declared is a RolloutPolicy without entropy_recorder
    """
    name = type(policy).__name__
    if not callable(policy):
        raise PolicyContractError(f"the policy must be callable on a TensorDict of rows, got {name}")
    if isinstance(policy, RolloutPolicy) or RolloutPolicy in type(policy).__mro__:
        _check_members(policy, RolloutPolicy, name, "is a RolloutPolicy")
        view = policy
    else:
        view = _PlainPolicy(policy)
    if view.input_mode == "tokens":
        _check_members(view, TokenPromptPolicy, name, "is a token-prompt policy (input_mode='tokens')")
    if view.owns_trajectories:
        _check_members(view, TrajectoryOwner, name, "owns its trajectories (owns_trajectories=True)")
    recorder = view.entropy_recorder
    if recorder is not None and not isinstance(recorder, EntropyRecording):
        raise PolicyContractError(
            f"{name}.entropy_recorder is a {type(recorder).__name__}, not an EntropyRecording "
            "(clear(), num_steps, row_sums(lengths)); None records no entropy"
        )
    return view


_KEY_ROLE = {
    HISTORY_FULL: "the conversation with the reply appended as one assistant message (the env parses it)",
    TOKENS_RESPONSE: "the reply's generated token ids, one 1-D tensor per row (counted into num_tokens)",
}


def check_policy_output(out, num_rows: int, keys: tuple = POLICY_OUTPUT_KEYS) -> None:
    """Raise :class:`PolicyContractError` unless ``out`` satisfies the policy contract for ``num_rows`` rows.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"history": {"full": torch.zeros(2, 1)}}, batch_size=[2])  # no tokens
        >>> try:
        ...     check_policy_output(td, 2)
        ... except PolicyContractError as e:
        ...     print(str(e).splitlines()[0])
        policy output lacks ('tokens', 'response'): the reply's generated token ids, one 1-D tensor per row (counted into num_tokens).
    """
    if not isinstance(out, TensorDictBase):
        raise PolicyContractError(f"policy returned {type(out).__name__}, expected a TensorDict with {list(keys)}")
    # membership per key: listing every nested key of a lazy stack walks all its rows (~10 ms a turn)
    present = out.keys(include_nested=True)
    for key in keys:
        if key not in present:
            raise PolicyContractError(
                f"policy output lacks {key}: {_KEY_ROLE[key]}.\n"
                "torchrl's TransformersWrapper/vLLMWrapper with input_mode='history', generate=True write it "
                "(see ragen_torchrl.collectors.make_generation_policy); a scripted policy must set "
                "('history', 'full') and ('tokens', 'response') itself, e.g. tokenizer(reply).input_ids per row"
            )
    rows = int(out.batch_size[0]) if out.batch_dims else 1
    if rows != num_rows:
        raise PolicyContractError(f"policy returned {rows} rows for {num_rows} input rows; it must keep the batch")

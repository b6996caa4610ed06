"""Rollout generation through vLLM (``rollout.backend=vllm``), with the training model's weights.

``rollout.backend=hf`` (the default) generates with transformers' ``generate``
(:func:`~ragen_torchrl.collectors.make_generation_policy`). ``rollout.backend=vllm`` generates with a
vLLM engine, in either trajectory mode of ``rollout.trajectory``, so
:func:`~ragen_torchrl.collectors.collect_rollouts` cannot tell the two backends apart;
:func:`~ragen_torchrl.collectors.rollout_policy.build_rollout_policy` picks one.

* ``rollout.trajectory=tokens`` (the default): :class:`~ragen_torchrl.collectors.vllm_token_policy.VLLMTokenPolicy`,
  a token-prompt policy (``input_mode="tokens"``). The collector keeps each row's trajectory as ids (first prompt, every
  reply as sampled, every env turn tokenised once: :mod:`~ragen_torchrl.collectors.token_trajectory`)
  and passes it as ``("tokens", "prompt")``; the policy sends it to the engine as a token prompt
  and writes back the sampled ids (``("tokens", "response")``, cut after the first end-of-turn id,
  as the hf token path cuts them) and the engine's log-probs of those ids
  (``("log_probs", "response")``). The update trains exactly the ids that were sampled, as on the
  hf path. vLLM's automatic prefix caching keeps each row's earlier turns' KV blocks: the next
  turn's prompt extends the last one, so only the new tokens are prefilled.
* ``rollout.trajectory=history``: torchrl's :class:`~torchrl.modules.llm.vLLMWrapper` in history mode
  (the conversation rendered by the chat template at each turn), its replies re-parsed as the hf
  path parses them (:func:`reparse_replies`).

Design:

* **vLLM samples; the training model scores.** The behaviour log-probs of the importance ratio are
  computed by the training model on the collected tokens, as on the ``hf`` path
  (:func:`~ragen_torchrl.objectives.logprobs.behaviour_batch`): vLLM runs in another dtype with
  other kernels (and, when it lags, other weights), so its log-probs differ from the ones the loss
  differentiates and would bias the ratio. The engine's log-probs of the sampled ids are kept
  beside them (``("log_probs", "response")`` per turn, ``("log_probs", "trajectory")`` per record,
  0 on the tokens that were not sampled) to measure that gap: the engine is built with
  ``logprobs_mode="processed_logprobs"``, the distribution after temperature, which is what the
  trainer scores (:func:`~ragen_torchrl.objectives.logprobs.make_logprob_policy`'s ``temperature``).
* **The engine starts from the training model's weights.** The model and tokenizer in memory are
  written with ``save_pretrained`` to a temporary directory and ``vllm.LLM`` loads it (the directory
  the model came from may hold other weights, e.g. before the SFT warm start, or another vocabulary
  size after a pad token was added).
* **Weights are pushed after every update** through vLLM's public ``LLM.apply_model``:
  :class:`VLLMWeightSync` runs the engine model's ``load_weights`` (which maps Hugging Face names
  onto vLLM's fused layers) on the training model's parameters and clears the engine's prefix
  cache (``LLM.reset_prefix_cache``: cached KV blocks were computed by the old weights). The
  trainer calls :meth:`VLLMWeightSync.push` after each optimizer update and after it loads weights
  into the model (a resumed run), so each rollout samples from the current policy. torchrl 0.14's
  weight-sync schemes for vLLM do not fit a same-process engine: the NCCL scheme
  (``VLLMWeightSyncScheme``) needs a Ray/``AsyncVLLM`` engine in other processes, the double-buffer
  scheme writes every parameter to disk per update, and ``LocalLLMWrapper.update_weights`` is a no-op.
  The engine therefore runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``; under ``torchrun``
  vLLM's ``external_launcher`` executor: one engine per rank, each on its rank's GPU), so
  ``apply_model``'s function runs here and the push is a GPU-to-GPU copy with no serialisation.
* **Same sampling as the hf path** (:func:`vllm_sampling_kwargs`): ``temperature`` (greedy at 0), the
  full distribution by default (``top_k=-1``, ``top_p=1.0``, ``min_p=0.0``, no repetition, presence or
  frequency penalty, all passed explicitly, and the engine is built with ``generation_config="vllm"``
  so a checkpoint's ``generation_config.json`` does not set defaults), the same ``rollout.top_k`` /
  ``top_p`` / ``min_p`` truncation when asked, and the same chat template (``wrapper_chat_template``).
  The token policy stops at the ids the hf path stops at
  (:func:`~ragen_torchrl.models.vision.stop_token_ids`: the generation config's end ids, else the
  tokenizer's eos), and at no other (``ignore_eos=True``: not at a tokenizer eos outside that set).
* **Same assistant message as the hf path** (:func:`reparse_replies`, history mode): torchrl's vLLM
  wrapper puts the raw reply text, end-of-turn token included, into the assistant message, while the
  transformers wrapper parses the decoded conversation back into messages (no end-of-turn token,
  whitespace trimmed). The vLLM policy re-parses the same way, so the next turn's prompt and the
  conversation the training model scores are identical across backends. In token mode the
  collector writes the message from the ids, as for the hf token path.

vLLM is an optional dependency (``pip install 'ragen_torchrl[vllm]'``, the versions torchrl 0.14 is
written against: ``vllm>=0.17,<0.19``) that needs a CUDA GPU; it is imported only when an engine is
built, so this module imports without it (a test double of ``vllm.LLM`` drives the token policy on
the CPU: ``tests/test_vllm_backend.py``).

Example (the backends' sampling agree; without vLLM, asking for it says what to install):
    >>> from ragen_torchrl.collectors.vllm_backend import require_vllm, vllm_sampling_kwargs
    >>> vllm_sampling_kwargs(max_new_tokens=32, temperature=0.7)["top_k"]  # -1: no top-k
    -1
    >>> try:
    ...     require_vllm()  # on a machine without vLLM (or without a CUDA GPU)
    ... except ImportError as e:
    ...     print(str(e).split(":")[0])
    ... else:
    ...     print("rollout.backend=vllm needs vLLM")  # vLLM and a GPU are here
    rollout.backend=vllm needs vLLM
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
from collections.abc import Iterator

import torch
from tensordict import TensorDictBase
from torchrl.modules.llm import vLLMWrapper

from ..models.loading import wrapper_chat_template
from ..models.priming import primed_chat_template
from ..models.vision import stop_token_ids
from .generation import (
    build_generating_wrapper,
    check_trajectory,
    hf_generate_kwargs,
    token_policy_template,
    warn_if_truncated,
)
from .policy_protocol import RolloutPolicy
from .vllm_token_policy import LOG_PROBS_RESPONSE, VLLMTokenPolicy, reply_from_output, token_sampling_kwargs

__all__ = [
    "LOG_PROBS_RESPONSE",
    "VLLMTokenPolicy",
    "VLLMUnavailableError",
    "VLLMWeightSync",
    "find_vllm_model",
    "make_vllm_generation_policy",
    "reparse_replies",
    "reply_from_output",
    "require_vllm",
    "token_sampling_kwargs",
    "vllm_engine_kwargs",
    "vllm_sampling_kwargs",
]

log = logging.getLogger(__name__)

_INSTALL_HINT = "pip install 'ragen_torchrl[vllm]' (on a machine with a CUDA GPU)"


class VLLMUnavailableError(ImportError):
    """vLLM cannot run here: it is not installed, or there is no CUDA GPU (the message says which)."""


def require_vllm():
    """Import and return the ``vllm`` module, or raise :class:`VLLMUnavailableError` naming the fix.

    Example:
        >>> try:
        ...     vllm = require_vllm()
        ... except VLLMUnavailableError as e:
        ...     print("ragen_torchrl[vllm]" in str(e) or "CUDA" in str(e))
        ... else:
        ...     print(True)
        True
    """
    if importlib.util.find_spec("vllm") is None:
        raise VLLMUnavailableError(
            f"rollout.backend=vllm needs vLLM: {_INSTALL_HINT}; rollout.backend=hf (the default) "
            "generates with transformers"
        )
    if not torch.cuda.is_available():
        raise VLLMUnavailableError(
            "rollout.backend=vllm needs a CUDA GPU (none is visible); use rollout.backend=hf on CPU"
        )
    try:
        return importlib.import_module("vllm")
    except Exception as e:  # a broken install (CUDA/torch mismatch): say so, not a deep traceback
        raise VLLMUnavailableError(f"vLLM is installed but does not import ({e}); reinstall: {_INSTALL_HINT}") from e


# ----------------------------------------------------------------------------- sampling
def vllm_sampling_kwargs(
    max_new_tokens: int, temperature: float, *, top_k: int | None = None, top_p: float = 1.0, min_p=None
) -> dict:
    """vLLM ``SamplingParams`` keywords that sample as :func:`~ragen_torchrl.collectors.hf_generate_kwargs`.

    Greedy at ``temperature`` 0; otherwise ``temperature`` over the full distribution unless
    ``top_k`` / ``top_p`` / ``min_p`` truncate it, every setting explicit (``top_k=-1`` and
    ``min_p=0.0`` are vLLM's "off"; no repetition, presence or frequency penalty).

    Example:
        >>> vllm_sampling_kwargs(64, 1.0)
        {'max_tokens': 64, 'temperature': 1.0, 'top_k': -1, 'top_p': 1.0, 'min_p': 0.0, 'repetition_penalty': 1.0, \
'presence_penalty': 0.0, 'frequency_penalty': 0.0}
        >>> vllm_sampling_kwargs(64, 0.0)
        {'max_tokens': 64, 'temperature': 0.0}
    """
    hf = hf_generate_kwargs(max_new_tokens, temperature, top_k=top_k, top_p=top_p, min_p=min_p)  # same checks
    kwargs = {"max_tokens": hf["max_new_tokens"]}
    if not hf["do_sample"]:
        # greedy: vLLM ignores top-k/top-p at temperature 0, as generate does with do_sample=False
        kwargs["temperature"] = 0.0
        return kwargs
    kwargs.update(
        temperature=hf["temperature"],
        top_k=hf["top_k"] or -1,
        top_p=hf["top_p"],
        min_p=hf["min_p"] or 0.0,
        repetition_penalty=1.0,
        presence_penalty=0.0,
        frequency_penalty=0.0,
    )
    return kwargs


# ----------------------------------------------------------------------------- the engine
def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model under DDP (``.module``) and ``torch.compile`` (``._orig_mod``) wrappers,
    whose parameter names carry a prefix vLLM does not know."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, torch.nn.Module):
            model = model._orig_mod
        else:
            return model


def _distributed_world() -> int:
    return (
        torch.distributed.get_world_size()
        if torch.distributed.is_available() and torch.distributed.is_initialized()
        else 1
    )


def vllm_engine_kwargs(
    model: torch.nn.Module,
    *,
    gpu_memory_utilization: float = 0.3,
    dtype: str | torch.dtype = "auto",
    seed: int = 0,
    world_size: int | None = None,
    **extra,
) -> dict:
    """Keywords of ``vllm.LLM`` for an engine beside the training model (pure: builds nothing).

    * ``dtype="auto"`` is the training model's dtype (the hf path generates in it too);
    * ``logprobs_mode="processed_logprobs"``: the log-probs returned are those of the distribution
      sampled (after temperature), the one the trainer scores, not vLLM's default raw logits;
    * ``gpu_memory_utilization`` is vLLM's share of the GPU (weights + KV cache): the training model,
      its gradients and optimizer state share the GPU, hence 0.3 by default;
    * under ``torchrun`` (``world_size`` > 1, default: the initialised process group's) vLLM's
      ``external_launcher`` executor: one engine per rank in the rank's process, seeded per rank
      (each rank samples its own rollouts).

    Example:
        >>> kw = vllm_engine_kwargs(torch.nn.Linear(2, 2).to(torch.bfloat16), seed=3, world_size=1)
        >>> kw["dtype"], kw["seed"], kw["gpu_memory_utilization"], "distributed_executor_backend" in kw
        ('bfloat16', 3, 0.3, False)
        >>> vllm_engine_kwargs(torch.nn.Linear(2, 2), gpu_memory_utilization=1.5)
        Traceback (most recent call last):
        ...
        ValueError: gpu_memory_utilization must be in (0, 1], got 1.5
    """
    if not 0 < float(gpu_memory_utilization) <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if dtype == "auto":
        dtype = next(_unwrap(model).parameters()).dtype
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    world = _distributed_world() if world_size is None else int(world_size)
    rank = torch.distributed.get_rank() if world > 1 and torch.distributed.is_initialized() else 0
    kwargs = {
        "dtype": dtype,
        "gpu_memory_utilization": float(gpu_memory_utilization),
        # different samples on each rank: the ranks play different levels' groups
        "seed": int(seed) + rank,
        "tensor_parallel_size": 1,
        # vLLM's own sampling defaults, not the checkpoint's generation_config.json (top_k, ...)
        "generation_config": "vllm",
        # the sampled ids' log-probs after temperature: what the trainer's behaviour pass scores
        "logprobs_mode": "processed_logprobs",
    }
    if world > 1:
        # one in-process engine per torchrun rank (TRL's "colocate" layout); vLLM takes the rank's
        # device and process group from the torchrun environment
        kwargs["distributed_executor_backend"] = "external_launcher"
    kwargs.update(extra)
    return kwargs


def _export(model: torch.nn.Module, tokenizer, directory: str) -> str:
    """Write the in-memory model and tokenizer where ``vllm.LLM`` can load them."""
    hf = _unwrap(model)
    hf.save_pretrained(directory, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return directory


# ----------------------------------------------------------------------------- replies
def reparse_replies(chat_history, text_full: list[str], tokenizer, chat_template_name: str | None = None):
    """Rebuild ``chat_history.response`` and ``.full`` from the decoded conversations ``text_full``.

    torchrl's ``TransformersWrapper`` parses the decoded prompt + reply back into messages (the
    assistant message has no end-of-turn token and no surrounding whitespace); ``vLLMWrapper`` puts
    the raw reply text in it. This re-parses with the function ``TransformersWrapper`` uses, so the
    vLLM policy writes the same ``("history", "full")`` as the hf one. Modifies and returns ``chat_history``.
    """
    # the transformers wrapper's own parser: parity with the hf path by construction (tested, as it
    # is private to torchrl)
    from ..torchrl_compat import extract_responses_from_full_histories

    responses = extract_responses_from_full_histories(text_full, chat_history.prompt, chat_template_name, tokenizer)
    chat_history.response = responses
    chat_history.full = chat_history.prompt.extend(responses, inplace=False, dim=-1)
    return chat_history


class _RolloutvLLMWrapper(vLLMWrapper, RolloutPolicy):
    """torchrl's ``vLLMWrapper`` whose assistant messages are parsed as the hf path's are
    (:func:`reparse_replies`); one sample per prompt, as :func:`~ragen_torchrl.collectors.collect_rollouts`
    asks. A :class:`~ragen_torchrl.collectors.policy_protocol.RolloutPolicy` that keeps no per-row state
    (the protocol's no-op ``clear`` / ``release``) and records no entropy (the records' ``entropy`` is 0)."""

    owns_trajectories = False
    entropy_recorder = None

    def _from_vllm_generate_history(self, tensordict_input, sampling_params, out) -> TensorDictBase:
        result = super()._from_vllm_generate_history(tensordict_input, sampling_params, out)
        if self.num_samples is None:
            chat = result.get(self.history_key)
            text_full = result.get((self.text_key, "full"))
            text_full = text_full.tolist() if hasattr(text_full, "tolist") else list(text_full)
            result.set(self.history_key, reparse_replies(chat, text_full, self.tokenizer, self.chat_template_name))
        return result


def make_vllm_generation_policy(
    model: torch.nn.Module,
    tokenizer,
    *,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    min_p: float | None = None,
    reply_prime: str = "",
    gpu_memory_utilization: float = 0.3,
    dtype: str | torch.dtype = "auto",
    seed: int = 0,
    engine=None,
    trajectory: str = "tokens",
    sampling_params_cls=None,
    **engine_kwargs,
) -> VLLMTokenPolicy | vLLMWrapper:
    """A rollout policy that samples replies from a vLLM engine holding ``model``'s weights.

    ``trajectory="tokens"`` (``rollout.trajectory``, the default): a :class:`VLLMTokenPolicy` (the
    collector keeps each row's trajectory as ids and the update trains the ids sampled, as
    :func:`~ragen_torchrl.collectors.make_generation_policy`'s token policy); ``"history"``: a
    history-mode ``vLLMWrapper``. Either satisfies :func:`~ragen_torchrl.collectors.collect_rollouts`'
    policy contract like the hf policy of that mode (same chat template, same sampling:
    :func:`vllm_sampling_kwargs`, same end ids), without entropy recording (``entropy`` is 0 in the records).

    Args:
        model, tokenizer: the training model (on a CUDA device) and its tokenizer.
        max_new_tokens, temperature, top_k, top_p, min_p: as for the hf policy (``temperature`` 0 = greedy;
            the full distribution by default); ``reply_prime``: appended to every prompt, as there.
        gpu_memory_utilization, dtype, seed, **engine_kwargs: of the engine (:func:`vllm_engine_kwargs`;
            e.g. ``max_model_len``, ``enforce_eager``).
        engine: an existing ``vllm.LLM`` to sample from (e.g. the training policy's ``policy.model``
            for a validation policy at another temperature) instead of building one.
        trajectory: ``"tokens"`` or ``"history"``.
        sampling_params_cls: what builds the token policy's sampling parameters (default
            ``vllm.SamplingParams``; a test double's own class when ``engine`` is one).

    The engine is ``policy.model``; keep the model's weights in it with :class:`VLLMWeightSync`.

    Raises:
        VLLMUnavailableError: vLLM is not installed, or there is no CUDA GPU.
        ValueError: ``max_new_tokens < 1``, ``temperature < 0`` or an unknown ``trajectory``.

    Example (bad input is refused before vLLM is imported):
        >>> make_vllm_generation_policy(None, None, max_new_tokens=0)
        Traceback (most recent call last):
        ...
        ValueError: max_new_tokens must be >= 1, got 0
    """
    check_trajectory(trajectory)
    sampling = vllm_sampling_kwargs(max_new_tokens, temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    warn_if_truncated(top_k, top_p, min_p, temperature, backend="vLLM")
    if engine is None:
        vllm = require_vllm()
        # the engine must live in this process for VLLMWeightSync to reach its model (vLLM V1 runs
        # it in a subprocess by default); external_launcher implies it, the single-GPU case needs it
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
            log.warning("VLLM_ENABLE_V1_MULTIPROCESSING=0 is forced: weight sync needs the engine in this process")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        directory = tempfile.TemporaryDirectory(prefix="ragen_vllm_")
        _export(model, tokenizer, directory.name)
        kwargs = vllm_engine_kwargs(
            model, gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, seed=seed, **engine_kwargs
        )
        engine = vllm.LLM(model=directory.name, tokenizer=directory.name, **kwargs)
    else:
        directory = None
    if trajectory == "tokens":
        if sampling_params_cls is None:
            sampling_params_cls = require_vllm().SamplingParams
        stop_ids = stop_token_ids(model, tokenizer)  # the ids the hf token path cuts replies after
        policy = VLLMTokenPolicy(
            engine,
            tokenizer,
            sampling_params=sampling_params_cls(**token_sampling_kwargs(sampling, stop_ids)),
            stop_ids=stop_ids,
            # the template the hf token policy renders trajectories with: the same first prompts and env turns
            chat_template=token_policy_template(tokenizer, reply_prime),
            reply_prime=reply_prime,
        )
        policy._export_dir = directory
        return policy
    policy = build_generating_wrapper(
        _RolloutvLLMWrapper,
        engine,
        tokenizer,
        chat_template=primed_chat_template(wrapper_chat_template(tokenizer), reply_prime),
        input_mode="history",
        sampling=sampling,
        reply_prime=reply_prime,
    )
    # torchrl's constructor drops the SamplingParams fields it does not know (min_p): set them all
    for key, value in sampling.items():
        if hasattr(policy.sampling_params, key):
            setattr(policy.sampling_params, key, value)
    # the exported checkpoint lives as long as the policy: vLLM may read its config files after start-up
    policy._export_dir = directory
    return policy


# ----------------------------------------------------------------------------- weight sync
#: where vLLM keeps the ``torch.nn.Module`` it runs, for an in-process engine object without
#: ``LLM.apply_model`` (:class:`VLLMWeightSync` uses that public call when it is there), newest first:
#: V1 (``LLMEngine.model_executor`` exists when multiprocessing is off; the driver worker wraps the
#: GPU worker), the same reached through the in-process engine core, and V0 (vLLM < 0.11)
_MODEL_PATHS = (
    ("llm_engine", "model_executor", "driver_worker", "worker", "model_runner", "model"),
    ("llm_engine", "engine_core", "engine_core", "model_executor", "driver_worker", "worker", "model_runner", "model"),
    ("llm_engine", "model_executor", "driver_worker", "model_runner", "model"),
)


def find_vllm_model(engine) -> torch.nn.Module:
    """The model a ``vllm.LLM`` runs in this process (the object with ``load_weights``).

    Raises:
        RuntimeError: none of the known attribute paths leads to one (the engine runs in another
            process, or a vLLM version whose layout this module does not know): says which.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> inner = NS(load_weights=lambda weights: set())
        >>> v1 = NS(llm_engine=NS(model_executor=NS(driver_worker=NS(worker=NS(model_runner=NS(model=inner))))))
        >>> find_vllm_model(v1) is inner
        True
    """
    for path in _MODEL_PATHS:
        obj = engine
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if obj is not None and callable(getattr(obj, "load_weights", None)):
            return obj
    version = (
        getattr(importlib.import_module("vllm"), "__version__", "?") if importlib.util.find_spec("vllm") else "none"
    )
    tried = ", ".join("engine." + ".".join(p) for p in _MODEL_PATHS)
    raise RuntimeError(
        f"cannot reach the model inside the vLLM engine (vLLM {version}; tried {tried}). The engine must run "
        "in this process: build it with VLLM_ENABLE_V1_MULTIPROCESSING=0 (make_vllm_generation_policy does), "
        "on vLLM >= 0.8 (V1) or a V0 engine"
    )


class VLLMWeightSync:
    """Copies the training model's current weights into a vLLM engine in this process.

    :meth:`push` hands ``model``'s parameters, under their Hugging Face names, to the engine model's
    ``load_weights`` (which maps them onto vLLM's fused ``qkv_proj``/``gate_up_proj`` layers and
    skips a tied ``lm_head``) through vLLM's public ``LLM.apply_model`` (the function runs on the
    model inside each worker; the engine is in this process, so the tensors are not serialised),
    and resets the engine's prefix cache (``LLM.reset_prefix_cache``). The copy runs on the GPU when
    both models are there, casting to the engine's dtype. An engine object without ``apply_model``
    is searched for its model (:func:`find_vllm_model`).

    Args:
        model: the training model (a DDP or ``torch.compile`` wrapper is looked through).
        policy: the vLLM policy (its ``.model`` is the engine) or the ``vllm.LLM`` itself.

    Example (a stand-in engine whose model records what it receives):
        >>> from types import SimpleNamespace as NS
        >>> got = []
        >>> def load_weights(weights):
        ...     got.extend((name, tuple(t.shape)) for name, t in weights)
        ...     return {name for name, _ in got}
        >>> engine = NS(apply_model=lambda fn: [fn(NS(load_weights=load_weights))], reset_prefix_cache=lambda: None)
        >>> VLLMWeightSync(torch.nn.Linear(3, 2), engine).push()
        2
        >>> got
        [('weight', (2, 3)), ('bias', (2,))]
    """

    def __init__(self, model: torch.nn.Module, policy) -> None:
        self.model = model
        self.engine = policy.model if isinstance(policy, (vLLMWrapper, VLLMTokenPolicy)) else policy
        self._target = None  # the model found by attribute, for an engine without apply_model
        self.pushes = 0

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, tensor)`` of every parameter, as a Hugging Face checkpoint names it (tied ones once)."""
        for name, param in _unwrap(self.model).named_parameters():
            yield name, param.detach()

    def _load(self, weights: list[tuple[str, torch.Tensor]]) -> list:
        """What the engine's model(s) report loading: one result per worker."""
        apply_model = getattr(self.engine, "apply_model", None)
        if callable(apply_model):
            return list(apply_model(lambda engine_model: engine_model.load_weights(iter(weights))))
        if self._target is None:
            self._target = find_vllm_model(self.engine)
        return [self._target.load_weights(iter(weights))]

    @torch.no_grad()
    def push(self) -> int:
        """Load the model's current weights into the engine; returns how many tensors were sent.

        Raises:
            RuntimeError: the engine's model cannot be reached (:func:`find_vllm_model`), or vLLM
                reports that it loaded none of the weights (names it does not know).
        """
        weights = list(self.named_weights())
        for loaded in self._load(weights):
            # vLLM returns the names it loaded (its own, fused ones); none at all means a name mismatch
            if isinstance(loaded, (set, list, tuple)) and weights and not loaded:
                raise RuntimeError(
                    f"vLLM loaded none of the {len(weights)} weights pushed (names such as {weights[0][0]!r}); "
                    "does the engine run the same architecture as the training model?"
                )
        reset = getattr(self.engine, "reset_prefix_cache", None)
        if callable(reset):
            # cached KV blocks hold the old weights' activations: drop them
            reset()
        self.pushes += 1
        return len(weights)

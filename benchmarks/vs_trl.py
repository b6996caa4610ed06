"""One GRPO step, ours vs TRL's ``GRPOTrainer``, on the same model, prompts and batch; plus where our time goes.

What is compared
    Ours: one :meth:`ragen_torchrl.trainer.loop.Trainer.train_iteration` (rollout, advantage,
    behaviour log-probs, one optimizer step), the Trainer built by Hydra compose with
    ``env=countdown trainer.prompts_per_iter=8 trainer.group_size=8 rollout.max_new_tokens=64
    algo.mini_batch_size=64 algo.update_epochs=1 diagnostics.mi.enabled=false filter=none
    sft.enabled=false model.device=cpu model.dtype=float32``.
    TRL: one optimizer step of ``trl.GRPOTrainer`` (``trainer.train()`` for 1 + N steps, each step
    timed by a callback from ``on_step_begin`` to ``on_step_end``). A GRPOTrainer step *includes*
    generation: ``training_step`` -> ``_prepare_inputs`` generates and scores the batch, then the
    loss forward, backward, gradient clipping and ``optimizer.step``.

Same work on both sides
    * model: the trainer's tiny Qwen2 (:mod:`ragen_torchrl.models.tiny`, the ``model=tiny``
      defaults: 1.08M parameters; pass
      ``--override model.hidden_size=...`` for another), tokenizer trained on the Countdown env's
      corpus, saved once and loaded by each side with ``from_pretrained``
      (:func:`~ragen_torchrl.models.loading.load_pretrained`), float32 on CPU. ``--model DIR``
      runs both sides (and the multi-turn table) on any local Hugging Face checkpoint instead:
      tokenizer, chat template and weights from DIR, ours loading it as a user would
      (``model=hf model.name_or_path=DIR``). ``--build-model DIR`` saves a 2.56M-parameter Qwen2
      (hidden 256, 4 layers, ChatML template, our byte-level BPE tokenizer) to try it on. Random
      initialisation by default (``--init random``; a warm start does not change what is
      timed, and replies then run to the token limit on both sides); ``--init sft`` starts
      both sides from the trainer's warm start (built and cached on first use).
    * prompts: the Countdown env's own: its system prompt + the first observation of the same
      level seeds (``train_level_seeds(seed, step, P)``) as chat messages, rendered by the
      tokenizer's chat template on both sides; P=8 prompts x G=8 samples per step.
    * sampling: 64 new tokens, temperature 1.0, top_p 1.0, no top-k: the full distribution on both
      sides (ours: ``rollout.top_k=null``; TRL: GRPOConfig's default ``top_k=0``), one ``generate``
      call for the 64 rows. Ours draws each token by inverse CDF (``rollout.sampler=inverse_cdf``),
      TRL through ``transformers``' ``torch.multinomial``.
    * reward: the env's Countdown reward. TRL's reward function replays the reply through the
      env's reply parser and the game core (:class:`~ragen_torchrl.envs.games.countdown.CountdownGame`),
      format penalty included; ours steps the TorchRL env.
    * update: one optimizer step per batch (ours ``mini_batch_size=64, update_epochs=1``; TRL
      ``per_device_train_batch_size=64, gradient_accumulation_steps=1, steps_per_generation=1,
      num_iterations=1``), ``beta=0`` (no reference model), same lr (2e-4, constant), AdamW
      (``adamw_torch``, weight decay 0), clip epsilon 0.2, max grad norm 1.0, entropy bonus
      0.001, group-normalised advantages, token mean per sequence then mean over sequences
      (TRL ``loss_type="grpo"``, ``scale_rewards="group"``), float32 (GRPOConfig's default is bf16),
      ``use_cpu=True``, ``report_to=[]``, no saving, no evaluation, no logging. TRL runs twice:
      without gradient checkpointing (the same work as ours) and with it (GRPOConfig's default:
      each layer's forward runs again in the backward pass); both ratios are printed.
    * threads: ``torch.set_num_threads(--threads)`` (2) for both, checked at every step.

How it is measured
    One warm-up step each, then ``--steps`` rounds (default 3) per TRL variant, each round: one TRL
    step, one ``Trainer.train_iteration()`` (the number the ratio uses) and, beside the variant
    without checkpointing, one instrumented iteration composed from the trainer's pieces (same
    prompts as the round's TRL step), so machine noise hits both sides alike. The instrumented iteration times generation (the policy call),
    env (reset + step), behaviour log-probs, loss forward, backward, optimizer (clip + step) and
    bookkeeping (everything else: rollout row handling, reward shaping, advantages, batch
    assembly, metrics); its total is printed next to the whole iteration's so the sum can be
    checked. TRL's step is broken down the same way by wrapping its methods (``_generate``,
    ``_calculate_rewards``, ``_get_per_token_logps_and_entropies`` outside the loss,
    ``compute_loss``, ``accelerator.backward``, ``_clip_grad_norm`` + ``optimizer.step``).
    Each step's CPU time (``time.process_time``) is recorded beside its wall time and the ratio
    printed both ways: on a loaded machine a step's wall time is mostly waiting for a core, its
    CPU time much less so.
    A second table times our multi-turn FrozenLake iteration alone (P=16 x G=4, the default
    ``ragen-train`` batch and update settings: 48 new tokens per turn, mini-batches of 16; started
    from the default run's cached warm start, ``--mt-init random`` for none; MI diagnostics off),
    broken down the same way.

Usage (TRL is the ``bench`` extra: ``pip install -e ".[bench]"``)::

    RAGEN_CACHE=/tmp/ragen_cache python benchmarks/vs_trl.py             # 8 x 8, 64 tokens, 3 timed steps
    RAGEN_CACHE=/tmp/ragen_cache python benchmarks/vs_trl.py --quick     # 4 x 4, 32 tokens, 1 timed step
    python benchmarks/vs_trl.py --build-model /tmp/small-chatml           # save the 2.56M checkpoint
    python benchmarks/vs_trl.py --model /tmp/small-chatml --no-multi-turn # both sides on that checkpoint

The header line prints which ``ragen_torchrl`` was imported: from a checkout other than the
installed (editable) one, prefix ``PYTHONPATH=$PWD``.

Results on a quiet machine, ``--steps 2`` (2026-12-01), with the update on the history path and on stored tokens
(stored tokens scored directly; no behaviour pass over the first, on-policy mini-batch)::

    before: ours 4.22 s, TRL 2.11 s, ratio 2.00 (rounds 2.02, 1.99)
    after:  ours 3.64 s, TRL 2.31 s, ratio 1.57 (rounds 1.59, 1.55)
    tokens the loss forward reads: ours 19562 (replies decoded and re-tokenised), TRL 15508

    piece (mean s/step)     ours before   ours after       TRL
    generation                    0.971        0.988     0.955
    env                           0.030        0.030     0.002
    behaviour log-probs           0.656        0.068     0.000
    loss forward                  1.130        0.854     0.439
    backward                      1.486        1.484     0.900
    optimizer                     0.004        0.005     0.006
    bookkeeping                   0.032        0.032     0.010

    multi-turn FrozenLake (16 x 4, warm start), whole train_iteration: 6.19 s before, 5.52 s after
    piece (mean s/step)     before    after
    generation               2.499    2.487
    behaviour log-probs      0.999    0.616
    loss forward             1.017    0.843
    backward                 1.402    1.404

Later the same day (quiet machine), the update trains the generated ids (``algo.train_on=generated``)
and runs each group's shared prompt once (``algo.shared_prefix=true``); first the commit before
these two changes (``--steps 2``), then after them (``--steps 4``)::

    before: ours 3.52 s, TRL 2.15 s, ratio 1.64 (rounds 1.73, 1.54); tokens scored 20435 vs 15508
    after:  ours 1.59 s, TRL 2.81 s, ratio 0.56 (rounds 0.64, 0.51, 0.59, 0.53); tokens 15510 vs 15502
    + each distinct prompt prefilled once in the rollout (``--steps 3``):
            ours 1.36 s, TRL 2.90 s, ratio 0.47 (rounds 0.45, 0.48, 0.49); generation 0.81 s vs TRL 0.99 s
    multi-turn FrozenLake (16 x 4, warm start), whole train_iteration: 4.14 s (generation 2.00 s,
    behaviour log-probs 0.45, loss forward 0.66, backward 1.06)

    piece (mean s/step)     ours before   ours after    TRL (after run)
    generation                    0.917        1.003     0.879
    env                           0.030        0.032     0.002
    behaviour log-probs           0.067        0.003     0.000
    loss forward                  1.191        0.254     0.816
    backward                      1.253        0.293     1.099
    optimizer                     0.007        0.004     0.004
    bookkeeping                   0.026        0.028     0.010

On the 2.56M-parameter ChatML checkpoint (``--build-model DIR`` then ``--model DIR --steps 1
--no-multi-turn --threads 1``; 2026-12-02, a 2-core machine at load average 12-18, so only the ratios
mean anything; one round each)::

    TRL variant                         ours     TRL  ours/TRL
    TRL, checkpointing off             26.31  105.00      0.25
    TRL, checkpointing on (default)    12.18   75.75      0.16
    piece (s)        ours   TRL off   TRL on
    generation     15.778    51.963   31.077
    loss forward    5.437    20.091   11.718
    backward       12.073    32.541   32.544

Decoding into a preallocated KV buffer (``TurnCachePolicy``; transformers' ``DynamicCache``
concatenated the whole cache at every step and layer), the commit before it and after it side by
side (2026-12-02, ``--steps 3 --threads 1 --no-multi-turn``, a 2-core machine at load average 10-16;
ours/TRL by CPU time of the process, per-round ratios after the arrow)::

    model   TRL variant        before   after (rounds)
    tiny    checkpointing off    0.62   0.56 (0.58, 0.52, 0.57)
    tiny    checkpointing on     0.56   0.48 (0.46, 0.49, 0.48)
    2.56M   checkpointing off    0.55   0.47 (0.49, 0.44, 0.49)
    2.56M   checkpointing on     0.48   0.40 (0.39, 0.42, 0.41)

With the inverse-CDF sampler (``rollout.sampler``), the one-gather shared-prefix loss and cascade
attention at the first turn, TRL given its default ``top_k=0`` (idle machine, ``--threads 1
--no-multi-turn``; wall-clock ratio, by CPU time in brackets; how each change moved it: ``CHANGELOG.md``)::

    model  steps   ckpt off          ckpt on (TRL default)
    tiny   6       0.42 (0.44)       0.39 (0.40)   rounds 0.36-0.49 / 0.35-0.44
    2.56M  3       0.47 (0.41)       0.36 (0.37)   rounds 0.41, 0.41, 0.58 / 0.30-0.43

The rounds spread by about +-0.05 around the mean on this machine (the third 2.56M round's wall time
was 1.5x its CPU time: the VM lost the core for a while).

The first "before" run (2026-11-30, the machine shared with four other jobs, ~0.4 of a core)
printed ratio 2.01 with every time 10-20x these; only its ratio is comparable.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import warnings
from collections import defaultdict
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402

import ragen_torchrl  # noqa: E402
from ragen_torchrl.collectors.grouped import collect_rollouts  # noqa: E402
from ragen_torchrl.envs.parsing import MAX_REPLY_CHARS, parse_response  # noqa: E402
from ragen_torchrl.envs.splits import train_level_seeds  # noqa: E402
from ragen_torchrl.keys import EPISODE_RETURN, GROUP_ID, MASKS_ASSISTANT, NUM_TOKENS, TOKENS_FULL  # noqa: E402
from ragen_torchrl.objectives.logprobs import attach_training_data, compute_behaviour_log_probs  # noqa: E402
from ragen_torchrl.trainer.early_stop import unfiltered_stats  # noqa: E402
from ragen_torchrl.trainer.run_log import summarize  # noqa: E402
from ragen_torchrl.trainer.update import clip_grad_norms, minibatch_plan, scores_shared_prefixes  # noqa: E402

#: the breakdown's rows, in print order; "bookkeeping" is the rest of the step
PIECES = ("generation", "env", "behaviour log-probs", "loss forward", "backward", "optimizer", "bookkeeping")


# -- timing helpers -------------------------------------------------------------------------
class Sections:
    """Named wall-clock accumulators: ``with sec("generation"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0

    def reset(self) -> None:
        self.seconds = defaultdict(float)


class TimedPolicy:
    """A generation policy whose calls count as ``generation``; every other member is the policy's own, so
    the collector drives it as it drives the policy (a token-prompt policy stays one: its turn cache and
    cascade attention run, not the history-rendering path)."""

    def __init__(self, policy, sections: Sections) -> None:
        self.policy, self.sections = policy, sections

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def __call__(self, td):
        with self.sections("generation"):
            return self.policy(td)


class TimedEnv:
    """An env whose ``reset``/``step`` count as ``env``; everything else is forwarded."""

    def __init__(self, env, sections: Sections) -> None:
        self.env, self.sections = env, sections

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, *args, **kwargs):
        with self.sections("env"):
            return self.env.reset(*args, **kwargs)

    def step(self, *args, **kwargs):
        with self.sections("env"):
            return self.env.step(*args, **kwargs)


def breakdown(sections: dict[str, float], total: float) -> dict[str, float]:
    """The :data:`PIECES` of one step; ``bookkeeping`` = ``total`` minus the timed pieces."""
    out = {k: float(sections.get(k, 0.0)) for k in PIECES if k != "bookkeeping"}
    out["bookkeeping"] = total - sum(out.values())
    out["total"] = total
    return out


# -- ours ----------------------------------------------------------------------------------
def compose_config(overrides: list[str]):
    """The trainer's Hydra config with ``overrides`` (composed from the package's config dir)."""
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config_paths import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=overrides)


def single_turn_overrides(prompts: int, group: int, max_new_tokens: int, threads: int, sft: bool) -> list[str]:
    """Countdown, P x G, one optimizer step per batch, nothing but the GRPO step itself."""
    return [
        "env=countdown",
        f"trainer.prompts_per_iter={prompts}",
        f"trainer.group_size={group}",
        "trainer.val_levels=8",
        f"rollout.max_new_tokens={max_new_tokens}",
        "rollout.temperature=1.0",
        f"algo.mini_batch_size={prompts * group}",
        "algo.update_epochs=1",
        "algo.kl_coeff=0.0",
        "diagnostics.mi.enabled=false",
        "diagnostics.grad_snr.every=0",
        "filter=none",
        f"sft.enabled={str(sft).lower()}",
        "model.device=cpu",
        "model.dtype=float32",
        f"model.threads={threads}",
    ]


def multi_turn_overrides(prompts: int, group: int, threads: int, sft: bool) -> list[str]:
    """FrozenLake with the default ``ragen-train`` batch/update settings, MI diagnostics off."""
    return [
        "env=frozenlake",
        f"trainer.prompts_per_iter={prompts}",
        f"trainer.group_size={group}",
        "trainer.val_levels=8",
        "diagnostics.mi.enabled=false",
        "diagnostics.grad_snr.every=0",
        "filter=none",
        f"sft.enabled={str(sft).lower()}",
        "model.device=cpu",
        "model.dtype=float32",
        f"model.threads={threads}",
    ]


def model_overrides(model_dir: str | None) -> list[str]:
    """Hydra overrides loading the policy from ``model_dir`` (``model=hf``); none for the tiny model.

    Example:
        >>> model_overrides(None), model_overrides("/ckpt/small")
        ([], ['model=hf', 'model.name_or_path=/ckpt/small'])
    """
    if model_dir is None:
        return []
    return ["model=hf", f"model.name_or_path={model_dir}"]


def check_model_dir(value: str) -> str:
    """``--model``'s value as an absolute path: a local Hugging Face model directory (config.json,
    tokenizer and weights from ``save_pretrained``); anything else is an error naming ``--model``."""
    from ragen_torchrl.model_source import ModelSourceError, check_model_source

    path = os.path.abspath(os.path.expanduser(value))
    try:
        if check_model_source(path, "--model", probe_hub=False) != "local":
            raise ModelSourceError(f"--model={value}: not a local model directory")
    except ModelSourceError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not any(os.path.exists(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        raise argparse.ArgumentTypeError(
            f"--model={value}: no tokenizer in {path} (tokenizer.json / tokenizer_config.json)"
        )
    return path


def build_checkpoint(
    out_dir: str, hidden_size: int = 256, intermediate_size: int = 512, num_layers: int = 4, vocab_size: int = 768
) -> str:
    """Save a Qwen2 checkpoint with a ChatML template and our byte-level BPE tokenizer to ``out_dir``.

    The tiny model's builder (:func:`ragen_torchrl.models.tiny.build_tiny_model`, tokenizer trained on
    the Countdown env's text) with other sizes; the defaults give 2.56M parameters (hidden 256,
    4 layers). ``out_dir`` is named by the caller, so nothing in the path says "qwen" (what a
    user's own checkpoint directory looks like). Returns ``out_dir``.
    """
    import shutil

    from ragen_torchrl.envs import make_env
    from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model
    from ragen_torchrl.trainer.demonstrations import tokenizer_corpus

    sizes = TinyModelConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size, num_layers=num_layers
    )
    with tempfile.TemporaryDirectory() as cache:
        built = build_tiny_model(tokenizer_corpus(make_env("countdown", num_envs=1)), sizes, cache)
        shutil.copytree(built, out_dir, dirs_exist_ok=True)
    return out_dir


def build_trainer(overrides: list[str], run_dir: str):
    from ragen_torchrl.trainer.loop import Trainer

    return Trainer(compose_config(overrides), run_dir=run_dir)


def _check_plain(tr) -> None:
    """The instrumented iteration mirrors train_iteration for the plain GRPO step only."""
    extras = {
        "filter": tr.snr,
        "MI diagnostics": tr.collapse,
        "gradient-SNR probe": tr.grad_snr,
        "reference model (KL)": tr.ref_actor,
        "dynamic sampling": tr.algorithm.dynamic_sampling,
    }
    on = [k for k, v in extras.items() if v is not None]
    if on or tr.t3_enabled or getattr(tr.val_env, "task_name", ""):
        raise ValueError(f"timed_iteration covers the plain GRPO step; turn off: {on or ['t3/task env']}")


def whole_iteration(tr, iteration: int) -> tuple[float, dict[str, float]]:
    """Seconds of one ``tr.train_iteration()`` on the levels of ``iteration``, and its stats."""
    tr.iteration = iteration
    t0 = time.perf_counter()
    stats = tr.train_iteration()
    return time.perf_counter() - t0, stats


def timed_iteration(tr, iteration: int) -> dict[str, float]:
    """``tr.train_iteration()`` composed from its pieces, each timed; returns the :func:`breakdown`.

    The same calls in the same order as :meth:`Trainer.train_iteration` (and
    :func:`ragen_torchrl.trainer.update.training_batch` / ``optimize``) for a run without
    filter, MI, DAPO, KL or gradient-SNR probe. Also reports ``tokens`` (generated tokens).
    """
    _check_plain(tr)
    sec = Sections()
    t_start = time.perf_counter()
    seeds = train_level_seeds(int(tr.cfg.seed), iteration, tr.prompts_per_iter)
    env, policy = TimedEnv(tr.env, sec), TimedPolicy(tr.policy, sec)
    records = collect_rollouts(env, policy, seeds, tr.group_size, chunk_size=int(tr.cfg.rollout.chunk_size))
    records = tr.algorithm.shape_rewards(records)
    summarize(records)
    fstats = unfiltered_stats(records.get(EPISODE_RETURN), records.get(GROUP_ID))
    tr.stops.guard.update(fstats)
    tr.stops.guard.metrics()
    # training_batch: advantage, behaviour log-probs (not for the rows of the first, on-policy
    # mini-batch of a one-epoch update), attach, prepare
    algo = tr.cfg.algo
    on_policy_first = bool(algo.on_policy_first_minibatch) and int(algo.update_epochs) == 1
    plan = minibatch_plan(records.get(GROUP_ID), algo)
    batch = tr.algorithm.advantage(records)
    with sec("behaviour log-probs"):
        behaviour = compute_behaviour_log_probs(
            tr.actor,
            batch,
            skip=plan[0][0] if on_policy_first else None,
            shared_prefix=scores_shared_prefixes(tr.loss_module),
            train_on=tr.algorithm.train_on,
        )
    batch = attach_training_data(batch, behaviour)
    batch, _ = tr.algorithm.prepare(batch)
    # optimize
    clip_groups = tr.algorithm.grad_clip_groups(float(algo.max_grad_norm))
    steps = 0
    for epoch, batches in enumerate(plan):
        for k, idx in enumerate(batches):
            minibatch = batch[idx]
            on_policy = on_policy_first and epoch == 0 and k == 0
            with sec("loss forward"), tr.loss_module.current_as_behaviour() if on_policy else contextlib.nullcontext():
                out = tr.loss_module(minibatch)
                loss = tr.algorithm.total_loss(out)
            tr.optimizer.zero_grad(set_to_none=True)
            if not torch.isfinite(loss):
                continue
            with sec("backward"):
                loss.backward()
            with sec("optimizer"):
                if not all(torch.isfinite(n) for n in clip_grad_norms(clip_groups).values()):
                    tr.optimizer.zero_grad(set_to_none=True)
                    continue
                tr.optimizer.step()
            steps += 1
            tr.algorithm.metrics(out, minibatch)
            loss.item()
    sum(int(m.sum()) for m in behaviour.get(MASKS_ASSISTANT, as_list=True))
    out = breakdown(sec.seconds, time.perf_counter() - t_start)
    out["tokens"] = float(records.get(NUM_TOKENS).sum())
    # what the log-prob and loss passes score: prompt + replies per row (a prompt shared by a
    # group's rows is run once with algo.shared_prefix, so the model reads fewer)
    out["scored_tokens"] = float(sum(len(t) for t in behaviour.get(TOKENS_FULL, as_list=True)))
    out["optimizer_steps"] = float(steps)
    return out


# -- TRL -----------------------------------------------------------------------------------
def countdown_prompt(env, level_seed: int) -> list[dict[str, str]]:
    """The Countdown env's first prompt of ``level_seed`` as chat messages (system + observation)."""
    game = env.game_factory(int(level_seed), 0)
    return [
        {"role": "system", "content": env.system_prompt},
        {"role": "user", "content": env.observation_text(game)},
    ]


def reply_reward(env, level_seed: int, reply: str) -> float:
    """The env's reward of a one-turn Countdown reply (its parser, format penalty and game core)."""
    game = env.game_factory(int(level_seed), 0)
    reply = reply[:MAX_REPLY_CHARS] if isinstance(reply, str) else ""
    parsed = parse_response(reply, game.action_names, env.max_actions_per_turn)
    actions = parsed.actions[: env.max_actions_per_traj]
    if not actions:
        return float(env.format_penalty)
    reward = env.format_penalty if parsed.penalised else 0.0
    for action in actions:
        r, done, _ = game.step(action)
        reward += r
        if done:
            break
    return float(reward)


def make_reward_function(env):
    """A TRL reward function (one float per completion) scoring replies like the env does."""

    def countdown_reward(completions, level_seed, **kwargs) -> list[float]:
        replies = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [reply_reward(env, s, r) for s, r in zip(level_seed, replies)]

    return countdown_reward


def trl_dataset(env, seed: int, prompts: int, num_steps: int):
    """``num_steps`` x ``prompts`` rows in step order: step s holds the levels of our iteration s."""
    from datasets import Dataset

    rows = []
    for step in range(num_steps):
        for s in train_level_seeds(seed, step, prompts):
            rows.append({"prompt": countdown_prompt(env, s), "level_seed": int(s)})
    return Dataset.from_list(rows)


def trl_config(
    output_dir: str, cfg, prompts: int, group: int, max_steps: int, seed: int = 0, gradient_checkpointing: bool = False
):
    """A GRPOConfig doing what our Trainer does with ``cfg``: one optimizer step per generation batch.

    ``gradient_checkpointing=True`` is GRPOConfig's own default (recompute each layer's activations
    in the backward pass: less memory, more compute); everything else stays as documented above.
    """
    from trl import GRPOConfig

    a = cfg.algo
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=prompts * group,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=group,
        num_iterations=1,
        beta=0.0,
        max_completion_length=int(cfg.rollout.max_new_tokens),
        temperature=float(cfg.rollout.temperature),
        top_p=1.0,
        top_k=0,  # GRPOConfig's default: the full distribution, as ours samples (rollout.top_k=null)
        learning_rate=float(a.lr),
        weight_decay=float(a.weight_decay),
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        max_grad_norm=float(a.max_grad_norm),
        epsilon=float(a.clip_epsilon),
        entropy_coef=float(a.entropy_coeff),
        loss_type="grpo",
        scale_rewards="group",
        max_steps=max_steps,
        shuffle_dataset=False,
        seed=seed,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=gradient_checkpointing,
        disable_dropout=True,
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        log_completions=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )


def instrument_trl(trainer, sections: Sections) -> None:
    """Wrap the GRPOTrainer's pieces so each step's time lands in :data:`PIECES`."""
    in_loss = [False]

    def timed(obj, name: str, piece: str) -> None:
        fn = getattr(obj, name)

        def wrapper(*args, **kwargs):
            with sections(piece):
                return fn(*args, **kwargs)

        setattr(obj, name, wrapper)

    timed(trainer, "_generate", "generation")
    timed(trainer, "_calculate_rewards", "env")
    timed(trainer.accelerator, "backward", "backward")
    timed(trainer, "_clip_grad_norm", "optimizer")

    compute_loss = trainer.compute_loss

    def loss_wrapper(*args, **kwargs):
        in_loss[0] = True
        try:
            with sections("loss forward"):
                return compute_loss(*args, **kwargs)
        finally:
            in_loss[0] = False

    trainer.compute_loss = loss_wrapper
    logps = trainer._get_per_token_logps_and_entropies

    def logps_wrapper(*args, **kwargs):
        if in_loss[0]:
            return logps(*args, **kwargs)
        with sections("behaviour log-probs"):  # TRL's old_per_token_logps pass (skipped when on-policy)
            return logps(*args, **kwargs)

    trainer._get_per_token_logps_and_entropies = logps_wrapper


def make_step_timer(sections: Sections, threads: int, after_step):
    """A TrainerCallback timing each step (``on_step_begin`` -> ``on_step_end``), then calling
    ``after_step(global_step, breakdown)`` (where our side runs: the two alternate)."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if torch.get_num_threads() != threads:
                raise RuntimeError(f"TRL step runs with {torch.get_num_threads()} threads, expected {threads}")
            sections.reset()
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.t_opt = time.perf_counter()

        def on_optimizer_step(self, args, state, control, **kwargs):
            sections.seconds["optimizer"] += time.perf_counter() - self.t_opt

        def on_step_end(self, args, state, control, **kwargs):
            total, cpu = time.perf_counter() - self.t0, time.process_time() - self.c0
            after_step(state.global_step, {**breakdown(sections.seconds, total), "cpu": cpu})

    return StepTimer()


def build_trl_trainer(
    model_path: str,
    env,
    cfg,
    prompts: int,
    group: int,
    steps: int,
    out_dir: str,
    threads: int,
    gradient_checkpointing: bool = False,
):
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from ragen_torchrl.models.loading import load_pretrained

    model, tok = load_pretrained(model_path, "cpu", "float32")
    args = trl_config(
        out_dir,
        cfg,
        prompts,
        group,
        max_steps=1 + steps,
        seed=int(cfg.seed),
        gradient_checkpointing=gradient_checkpointing,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=make_reward_function(env),
        args=args,
        train_dataset=trl_dataset(env, int(cfg.seed), prompts, 1 + steps),
        processing_class=tok,
    )
    trainer.remove_callback(PrinterCallback)  # no log lines (logging is off; the end-of-train summary)
    torch.set_num_threads(threads)  # after accelerate's setup, in case it touched them
    return trainer


# -- report --------------------------------------------------------------------------------
def mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def mean_breakdown(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: mean([r[k] for r in rows]) for k in (*PIECES, "total")}


def print_breakdown(title: str, columns: dict[str, dict[str, float]]) -> None:
    names = list(columns)
    print(f"\n{title}")
    head = f"{'piece (mean s/step)':<22}" + "".join(f"{n:>16}{'%':>6}" for n in names)
    print(head)
    for piece in (*PIECES, "total"):
        line = f"{piece:<22}"
        for n in names:
            col = columns[n]
            share = 100.0 * col[piece] / col["total"] if col["total"] > 0 else float("nan")
            line += f"{col[piece]:>16.3f}{share:>6.0f}"
        print(line)


def run_single_turn(args, cache: str) -> None:
    import trl

    tr = build_trainer(
        single_turn_overrides(args.prompts, args.group, args.max_new_tokens, args.threads, args.init == "sft")
        + model_overrides(args.model)
        + args.override,
        os.path.join(cache, "ours_countdown"),
    )
    torch.set_num_threads(args.threads)
    n_params = sum(p.numel() for p in tr.model.parameters())
    model_name = f"{args.model} (model=hf)" if args.model else "the tiny Qwen2 (model=tiny)"
    print(
        f"single turn: Countdown, P={args.prompts} x G={args.group}, {args.max_new_tokens} new tokens, "
        f"temperature 1.0, top_p 1.0, one optimizer step per batch, {args.threads} threads, "
        f"{model_name}: {n_params / 1e6:.2f}M parameters ({'warm start' if args.init == 'sft' else 'random init'}), "
        f"lr {float(tr.cfg.algo.lr):g}; ragen_torchrl from {os.path.dirname(ragen_torchrl.__file__)}, "
        f"trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}",
        flush=True,
    )
    t_warm, _ = whole_iteration(tr, 0)
    print(f"warm-up: ours {t_warm:.2f} s", flush=True)
    # TRL with gradient checkpointing off, then with it on (GRPOConfig's default); each TRL step is
    # followed by one of our iterations on the same levels, so each ratio pairs neighbouring steps
    results = {}
    for checkpointing in (False, True):
        label = f"TRL, gradient checkpointing {'on (GRPOConfig default)' if checkpointing else 'off'}"
        results[checkpointing] = trl_rounds(args, cache, tr, checkpointing, label)
    ours_pieces = results[False]["ours_pieces"]
    rows = []
    for checkpointing, r in results.items():
        label = "TRL, checkpointing " + ("on (default)" if checkpointing else "off")
        t_ours, t_trl = mean(r["ours"]), mean([x["total"] for x in r["trl"]])
        per_round = ", ".join(f"{o / t['total']:.2f}" for o, t in zip(r["ours"], r["trl"]))
        cpu = sum(r["ours_cpu"]) / sum(x["cpu"] for x in r["trl"])
        cpu_rounds = ", ".join(f"{o / t['cpu']:.2f}" for o, t in zip(r["ours_cpu"], r["trl"]))
        rows.append((label, t_ours, t_trl, per_round, cpu, cpu_rounds))
    print(f"\nseconds per step (mean of {args.steps} timed steps per side after one warm-up each, alternating)")
    print(f"{'TRL variant':<32}{'ours':>8}{'TRL':>8}{'ours/TRL':>10}  per-round ratios")
    for label, t_ours, t_trl, per_round, _, _ in rows:
        print(f"{label:<32}{t_ours:>8.2f}{t_trl:>8.2f}{t_ours / t_trl:>10.2f}  {per_round}")
    # on a loaded machine the wall time is mostly waiting for a core; the process's CPU time is steadier
    print(f"{'by CPU time of the process':<32}{'':>16}{'ours/TRL':>10}  per-round ratios")
    for label, *_, cpu, cpu_rounds in rows:
        print(f"{label:<32}{'':>16}{cpu:>10.2f}  {cpu_rounds}")
    r = results[False]
    print(
        f"(TRL's own step_time metric (training_step only), checkpointing off: "
        f"{mean([x['step_time'] for x in r['trl']]):.2f} s; "
        f"generated tokens per step: ours {mean([p['tokens'] for p in ours_pieces]):.0f}, "
        f"TRL {mean(r['trl_tokens']):.0f}; tokens the loss forward reads (prompts + replies): "
        f"ours {mean([p['scored_tokens'] for p in ours_pieces]):.0f} (algo.train_on={tr.algorithm.train_on}), "
        f"TRL {mean([x['scored_tokens'] for x in r['trl']]):.0f} (generated ids))"
    )
    print_breakdown(
        f"where the time goes (instrumented, mean of {len(ours_pieces)}; ours' whole train_iteration: "
        f"{mean(r['ours']):.2f} s)",
        {
            "ours": mean_breakdown(ours_pieces),
            "TRL ckpt off": mean_breakdown(results[False]["trl"]),
            "TRL ckpt on": mean_breakdown(results[True]["trl"]),
        },
    )


def trl_rounds(args, cache: str, tr, checkpointing: bool, label: str) -> dict[str, list]:
    """``args.steps`` rounds of one TRL step (after one warm-up step) then one of our iterations.

    Returns ``ours`` (our whole-iteration seconds), ``ours_cpu`` (their CPU seconds: this process's
    ``time.process_time``), ``trl`` (TRL step breakdowns, with ``cpu``),
    ``trl_tokens`` (TRL's generated tokens per step) and, when ``checkpointing`` is off,
    ``ours_pieces`` (our instrumented iterations; run once, beside the first TRL variant).
    """
    trl_sec = Sections()
    out: dict[str, list] = {"ours": [], "ours_cpu": [], "trl": [], "trl_tokens": [], "ours_pieces": []}
    seen_before = [0]

    def after_trl_step(global_step: int, trl_row: dict[str, float]) -> None:
        if global_step == 1:
            seen_before[0] = trainer.state.num_input_tokens_seen
            print(f"warm-up: {label} {trl_row['total']:.2f} s", flush=True)
            return
        own = trainer._metrics["train"].get("step_time", [])
        trl_row["step_time"] = own[-1] if own else float("nan")  # TRL's own metric: training_step only
        seen = trainer.state.num_input_tokens_seen  # prompt + completion tokens, cumulative
        trl_row["scored_tokens"], seen_before[0] = seen - seen_before[0], seen
        out["trl"].append(trl_row)
        it = global_step - 1  # TRL's step k used the levels of our iteration k (0-based)
        torch.set_num_threads(args.threads)
        c0 = time.process_time()
        t_whole, _ = whole_iteration(tr, it)
        out["ours"].append(t_whole)
        out["ours_cpu"].append(time.process_time() - c0)
        line = (
            f"round {len(out['ours'])}: {label} {trl_row['total']:.2f} s (CPU {trl_row['cpu']:.2f}) | "
            f"ours train_iteration {t_whole:.2f} s (CPU {out['ours_cpu'][-1]:.2f})"
        )
        if not checkpointing:
            pieces = timed_iteration(tr, it)
            out["ours_pieces"].append(pieces)
            line += f", instrumented {pieces['total']:.2f} s, {pieces['tokens']:.0f} tokens generated"
        lengths = trainer._metrics["train"].get("completions/mean_length", [])
        out["trl_tokens"].append(lengths[-1] * args.prompts * args.group if lengths else float("nan"))
        print(f"{line}; TRL {out['trl_tokens'][-1]:.0f}", flush=True)

    trainer = build_trl_trainer(
        tr.model_path,
        tr.env,
        tr.cfg,
        args.prompts,
        args.group,
        args.steps,
        os.path.join(cache, f"trl_ckpt_{checkpointing}"),
        args.threads,
        gradient_checkpointing=checkpointing,
    )
    instrument_trl(trainer, trl_sec)
    trainer.add_callback(make_step_timer(trl_sec, args.threads, after_trl_step))
    trainer.train()
    return out


def run_multi_turn(args, cache: str) -> None:
    tr = build_trainer(
        multi_turn_overrides(args.mt_prompts, args.mt_group, args.threads, args.mt_init == "sft")
        + model_overrides(args.model)
        + args.override,
        os.path.join(cache, "ours_frozenlake"),
    )
    torch.set_num_threads(args.threads)
    a = tr.cfg.algo
    print(
        f"\nmulti-turn (ours alone): FrozenLake, P={args.mt_prompts} x G={args.mt_group}, "
        f"{int(tr.cfg.rollout.max_new_tokens)} new tokens per turn, up to {tr.env.max_turn} turns, "
        f"mini-batches of {int(a.mini_batch_size)}, {'warm start' if args.mt_init == 'sft' else 'random init'}",
        flush=True,
    )
    t_warm, _ = whole_iteration(tr, 0)
    print(f"warm-up: {t_warm:.2f} s", flush=True)
    whole, pieces = [], []
    for r in range(args.steps):
        t_whole, _ = whole_iteration(tr, r + 1)
        whole.append(t_whole)
        pieces.append(timed_iteration(tr, r + 1))
        print(
            f"round {r + 1}: train_iteration {t_whole:.2f} s, instrumented {pieces[-1]['total']:.2f} s, "
            f"{pieces[-1]['tokens']:.0f} tokens, {pieces[-1]['optimizer_steps']:.0f} optimizer steps",
            flush=True,
        )
    print_breakdown(
        f"where the time goes (instrumented, mean of {len(pieces)}; whole train_iteration: {mean(whole):.2f} s)",
        {"ours multi-turn": mean_breakdown(pieces)},
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--quick`` applied); ``--model`` checked and made absolute."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (after one warm-up each)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--mt-prompts", type=int, default=16)
    parser.add_argument("--mt-group", type=int, default=4)
    parser.add_argument("--no-multi-turn", action="store_true", help="skip the FrozenLake table")
    parser.add_argument(
        "--model",
        type=check_model_dir,
        default=None,
        metavar="DIR",
        help="a local Hugging Face checkpoint (tokenizer, chat template and weights from DIR) for both sides "
        "and both tables, loaded as model=hf model.name_or_path=DIR; default: the tiny model",
    )
    parser.add_argument(
        "--build-model",
        metavar="DIR",
        default=None,
        help="save a 2.56M-parameter Qwen2 checkpoint (hidden 256, 4 layers, ChatML, our BPE tokenizer) to DIR "
        "and exit; then run with --model DIR",
    )
    parser.add_argument(
        "--init", choices=("random", "sft"), default="random", help="single turn: random init or the warm start"
    )
    parser.add_argument(
        "--mt-init", choices=("random", "sft"), default="sft", help="multi-turn: the default run's warm start"
    )
    parser.add_argument(
        "--override", nargs="*", default=[], help="extra Hydra overrides for both tables, e.g. model.hidden_size=192"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 timed step, 4 x 4, 32 tokens")
    args = parser.parse_args(argv)
    if args.model is not None and args.build_model is not None:
        parser.error("--model and --build-model: build first, then run with --model")
    if args.quick:
        args.steps, args.prompts, args.group, args.max_new_tokens = 1, 4, 4, 32
        args.mt_prompts, args.mt_group = 4, 4
    return args


def main() -> None:
    args = parse_args()
    if args.build_model is not None:
        path = build_checkpoint(args.build_model)
        print(f"saved {path}; run: python benchmarks/vs_trl.py --model {path}")
        return
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit("benchmarks/vs_trl.py needs TRL: pip install -e '.[bench]'") from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*size_average and reduce args.*")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as cache:
        run_single_turn(args, cache)
        if not args.no_multi_turn:
            run_multi_turn(args, cache)


if __name__ == "__main__":
    main()

"""ragen_torchrl: TorchRL-native multi-turn LLM agent RL.

Detects template collapse (mutual-information proxies), prevents it (SNR-aware
filtering) and truncates belief-trapped trajectories (T3).

Subpackages (each lists its public names in ``__all__``; ``import ragen_torchrl`` imports none of
them, so it stays cheap; import the one you need):

* :mod:`ragen_torchrl.keys`: the TensorDict key contract (every env step, record and
  training-batch key with its dtype, shape and meaning; ``KEY_TABLE``);
* :mod:`ragen_torchrl.envs`: chat envs and the registry (``make_env``);
* :mod:`ragen_torchrl.collectors`: grouped collection (G samples per level, ``collect_rollouts``);
* :mod:`ragen_torchrl.transforms`: ``SNRFilter``, ``TopVarianceGroupSampler``, ``GroupAdvantage``,
  ``T3Truncation``, ...;
* :mod:`ragen_torchrl.data`: ``Groups``, ``group_minibatches``;
* :mod:`ragen_torchrl.objectives`: the losses (GRPO, Dr.GRPO, DAPO, GSPO, PPO) and their
  log-prob plumbing (``make_logprob_policy``, ``compute_behaviour_log_probs``);
* :mod:`ragen_torchrl.diagnostics`: ``CollapseMonitor``, MI proxies, entropy metrics;
* :mod:`ragen_torchrl.models`: model loading, the tiny test model, ``EntropyRecorder``.

Example:
    >>> import ragen_torchrl.transforms
    >>> ragen_torchrl.transforms.SNRFilter.__module__
    'ragen_torchrl.transforms.snr'
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

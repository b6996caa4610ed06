"""The training loop and everything around it; its modules are the API (the package exports nothing,
so that importing a light module such as :mod:`.config_paths` or :mod:`.config` does not load the loop).

* :mod:`.loop`: :class:`~ragen_torchrl.trainer.loop.Trainer`; :mod:`.iteration`: its iteration's steps;
  :mod:`.stops`: the rules that end a run early; :mod:`.phases`: the phase clock's context manager;
  :mod:`.policies` and :mod:`.policy_export`: the rollout / log-prob policies and the exported policy dir;
  :mod:`.update`: one policy update; :mod:`.distributed`: ranks, FSDP2 and the loss split;
* :mod:`.config`, :mod:`.config_checks`, :mod:`.config_keys`, :mod:`.config_paths`: the Hydra config,
  its checks and its folder; :mod:`.cli`: ``ragen-train`` / ``ragen-sft``; :mod:`.evaluate`: ``ragen-eval``;
* :mod:`.model_setup`: the model and the dry-run memory report; :mod:`.sft` and :mod:`.demonstrations`:
  the supervised warm start;
* :mod:`.checkpoint`, :mod:`.early_stop`, :mod:`.run_log`, :mod:`.summary`, :mod:`.provenance`:
  checkpoints, stop rules, the run's log and summary.
"""

__all__: list[str] = []

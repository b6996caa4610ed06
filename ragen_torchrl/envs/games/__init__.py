"""Pure-Python game cores (no torch): rules, observation text and oracles, one module per game;
the TorchRL envs in :mod:`ragen_torchrl.envs` wrap them. Its modules are the API."""

__all__: list[str] = []

"""ragen_torchrl: TorchRL-native multi-turn LLM agent RL.

Detects template collapse (mutual-information proxies), prevents it (SNR-aware
filtering) and truncates belief-trapped trajectories (T3).
"""

__version__ = "0.1.0"

"""The one table of config keys that moved or were renamed: old dotted key -> (new key, why).

Every place that meets an old key reads it from here: the config check and the command-line check
(:func:`ragen_torchrl.trainer.config_moved.check_moved_keys`, ``check_moved_overrides``: a
``config error`` naming the new key), the filter node's own check (``validate_filter_config``)
and a resumed run's config comparison (a moved diagnostic is not a change that alters the run).
A renamed key is one line here.

Example:
    >>> MOVED_KEYS["algo.ppo_epochs"]
    ('algo.update_epochs', 'it applies to every algorithm')
    >>> sorted(moved_under("filter"))[:2]
    ['collapse_stop', 'grad_snr']
"""

from __future__ import annotations

__all__ = ["MOVED_KEYS", "moved_under"]

_STOPS = "the stops run with or without a filter"

MOVED_KEYS: dict[str, tuple[str, str]] = {
    "algo.ppo_epochs": ("algo.update_epochs", "it applies to every algorithm"),
    "algo.minibatch": ("algo.mini_batch_by", ""),
    "filter.max_consecutive_empty": ("trainer.early_stop.max_consecutive_empty", _STOPS),
    "filter.collapse_stop": ("trainer.early_stop.collapse_stop", _STOPS),
    "filter.val_stop": ("trainer.early_stop.val_stop", _STOPS),
    "filter.grad_snr": ("diagnostics.grad_snr", "a diagnostic, run with or without a filter"),
}


def moved_under(group: str) -> dict[str, tuple[str, str]]:
    """The moved keys of one node: ``{leaf: (new key, why)}`` (``moved_under("filter")["val_stop"]``)."""
    prefix = group + "."
    return {old[len(prefix) :]: moved for old, moved in MOVED_KEYS.items() if old.startswith(prefix)}

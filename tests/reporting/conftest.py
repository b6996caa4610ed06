"""Fixtures of the reporting tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions would save, kept open for inspection."""
    pytest.importorskip("matplotlib")
    from ragen_torchrl.reporting import plots

    kept = {}

    def keep(fig, path):
        kept[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(plots, "_save", keep)
    yield kept
    for fig in kept.values():
        plots.pyplot().close(fig)

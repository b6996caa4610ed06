"""The public API: each subpackage exports its public names (``__all__``), importable as a user would.

Imports such as ``from ragen_torchrl.transforms import SNRFilter`` work for every public name.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

SUBPACKAGES = ("transforms", "data", "objectives", "diagnostics", "models", "envs", "collectors")


def test_the_imports_of_the_issue_work():
    from ragen_torchrl.diagnostics import CollapseMonitor, cross_score, mi_proxies
    from ragen_torchrl.objectives import compute_behaviour_log_probs, make_logprob_policy
    from ragen_torchrl.transforms import SNRFilter, T3Truncation, TopVarianceGroupSampler

    assert SNRFilter.__module__ == "ragen_torchrl.transforms.snr"
    assert TopVarianceGroupSampler.__name__ == "TopVarianceGroupSampler"
    assert T3Truncation.__name__ == "T3Truncation"
    assert make_logprob_policy.__module__ == "ragen_torchrl.objectives.logprobs"
    assert callable(compute_behaviour_log_probs) and callable(cross_score) and callable(mi_proxies)
    assert CollapseMonitor.__module__ == "ragen_torchrl.diagnostics.collapse"


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_name_in_all_resolves(name):
    module = importlib.import_module(f"ragen_torchrl.{name}")
    exported = module.__all__
    assert exported and len(set(exported)) == len(exported), "duplicates in __all__"
    for attr in exported:
        assert getattr(module, attr) is not None, f"ragen_torchrl.{name}.{attr}"
    ns: dict = {}
    exec(f"from ragen_torchrl.{name} import *", ns)  # noqa: S102 - star import honours __all__
    assert set(exported) <= set(ns)


# envs exports its registry and base classes; an env's own names live in its module (ragen_torchrl.envs.sokoban)
@pytest.mark.parametrize("name", [n for n in SUBPACKAGES if n != "envs"])
def test_public_names_of_each_submodule_are_exported(name):
    """Whatever a submodule the package exports from declares public (its ``__all__``) the package exports too."""
    package = importlib.import_module(f"ragen_torchrl.{name}")
    sources = {getattr(getattr(package, attr), "__module__", None) for attr in package.__all__}
    for source in sorted(s for s in sources if s and s.startswith(package.__name__ + ".")):
        declared = getattr(importlib.import_module(source), "__all__", None)
        if declared is not None:
            assert set(declared) <= set(package.__all__), (
                f"{source} declares names ragen_torchrl.{name} does not export"
            )


def test_unknown_names_raise_attribute_error():
    import ragen_torchrl.transforms as t

    with pytest.raises(AttributeError, match="NoSuchThing"):
        t.NoSuchThing  # noqa: B018
    with pytest.raises(ImportError):
        exec("from ragen_torchrl.data import NoSuchThing", {})  # noqa: S102


def test_import_ragen_torchrl_is_cheap():
    code = (
        "import sys, ragen_torchrl\n"
        "heavy = [m for m in ('torch', 'torchrl', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert ragen_torchrl.__all__ == ['__version__']\n"
        "import ragen_torchrl.transforms\n"
        "assert ragen_torchrl.transforms.TopVarianceGroupSampler.__name__ == 'TopVarianceGroupSampler'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_objectives_keep_objective_and_build_objective():
    from ragen_torchrl.objectives import ALGORITHMS, Algorithm, build_algorithm

    obj = build_algorithm({"name": "dapo", "max_length": 16}, actor=None, model=None)
    assert isinstance(obj, Algorithm) and "dapo" in ALGORITHMS
    assert type(obj.loss_module).__name__ == "DAPOLoss"

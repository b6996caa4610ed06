"""Packaging beyond ``pyproject.toml``: the repository's top-level ``configs/`` ships inside the
package as ``ragen_torchrl/configs/`` (a ``package_dir`` mapping, which ``pyproject.toml`` cannot
combine with package discovery), so a wheel install finds its Hydra presets next to the code."""

from setuptools import find_packages, setup

setup(
    # hydra_plugins.ragen_torchrl_arms: the experiment sweeper (Hydra instantiates sweepers only from hydra_plugins)
    packages=[
        *find_packages(include=["ragen_torchrl", "ragen_torchrl.*"]),
        "ragen_torchrl.configs",
        "hydra_plugins.ragen_torchrl_arms",
    ],
    package_dir={"ragen_torchrl.configs": "configs"},
)

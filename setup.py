"""Packaging beyond ``pyproject.toml``: the repository's top-level ``configs/`` ships inside the
package as ``ragen_torchrl/configs/`` (a ``package_dir`` mapping, which ``pyproject.toml`` cannot
combine with package discovery), so a wheel install finds its Hydra presets next to the code."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["ragen_torchrl", "ragen_torchrl.*"]), "ragen_torchrl.configs"],
    package_dir={"ragen_torchrl.configs": "configs"},
)

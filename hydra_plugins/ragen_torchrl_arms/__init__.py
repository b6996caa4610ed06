"""Hydra plugins of ragen_torchrl: the ``ragen_arms`` sweeper (``ragen-train -m +experiment=NAME``)."""

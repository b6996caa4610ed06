"""``python -m ragen_torchrl.train``: the ``ragen-train`` entry point as a module, for launchers.

``torchrun`` starts a module or a script on every rank::

    torchrun --nproc_per_node=2 -m ragen_torchrl.train trainer=smoke hydra.run.dir=outputs/ddp

Every Hydra override of ``ragen-train`` works here too (see :mod:`ragen_torchrl.trainer.cli`).
"""

from .trainer.cli import train_main

if __name__ == "__main__":
    train_main()

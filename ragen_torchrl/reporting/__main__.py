"""``python -m ragen_torchrl.reporting RUN_DIR...``: the same as ``ragen-report``."""

from .cli import console_main

console_main()

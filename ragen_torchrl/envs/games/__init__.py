"""envs/games."""

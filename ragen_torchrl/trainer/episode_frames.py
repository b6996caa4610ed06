"""The observed images of evaluation episodes: recorded while they play, saved as an animated GIF or a PNG strip.

A visual env (:mod:`ragen_torchrl.envs.visual`) writes the uint8 ``[3, H, W]`` board image of
every row under ``"image"`` at reset and after every step. :class:`EpisodeFrames` keeps those
images for the first ``rows`` env rows of an evaluation (:func:`~ragen_torchrl.trainer.evaluate.evaluate_policy`
feeds it): ``frames[row]`` is the board the policy saw at each of its turns, then the final board,
so an episode of ``T`` turns has ``T + 1`` frames. With a text env nothing is recorded.

:func:`save_episode` writes one episode's frames as an animated GIF (``.gif``: one GIF frame per
observation, each the env's image with a ``turn_bar_px`` high bar under it whose filled length
shows the turn) or a PNG strip (``.png``: the frames side by side, ``gap`` px apart).
:func:`frame_strip` builds the strip as a uint8 ``[3, H, W]`` tensor (TensorBoard logs it too).

Example:
    >>> import tempfile, torch
    >>> from PIL import Image
    >>> frames = [torch.full((3, 8, 8), v, dtype=torch.uint8) for v in (0, 100, 200)]
    >>> path = save_episode(frames, tempfile.mkdtemp() + "/episode.gif")
    >>> Image.open(path).n_frames
    3
    >>> tuple(frame_strip(frames, gap=2).shape)
    (3, 8, 28)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from tensordict import TensorDictBase

from ..keys import ENV_INDEX, IMAGE

__all__ = ["DUMP_FORMATS", "EpisodeFrames", "frame_strip", "save_episode"]

#: file suffixes :func:`save_episode` writes
DUMP_FORMATS = (".gif", ".png")
#: the turn bar's filled and empty colours (RGB)
_BAR_ON, _BAR_OFF = (255, 160, 0), (40, 40, 40)


class EpisodeFrames:
    """Keeps the ``"image"`` observations of some env rows of an evaluation: ``rows`` = an int ``n``
    (rows ``0 .. n - 1``) or the row indices.

    :meth:`observe` takes every tensordict the env returns (the reset's, then each step's
    ``"next"``); the rows it holds are named by their ``env_index``. After the evaluation
    ``frames[row]`` lists row ``row``'s images in order (reset image first). Nothing is kept
    when the env writes no image (a text env) or ``rows`` is 0.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> rec = EpisodeFrames(rows=1)
        >>> td = TensorDict(env_index=torch.tensor([0, 1]), image=torch.zeros(2, 3, 4, 4, dtype=torch.uint8), batch_size=[2])
        >>> rec.observe(td); rec.observe(td[1:]); rec.observe(td[:1])
        >>> {row: len(images) for row, images in rec.frames.items()}
        {0: 2}
    """

    def __init__(self, rows: int | Sequence[int]) -> None:
        if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 0:
            rows = range(rows)
        listed = list(rows) if isinstance(rows, (Sequence, set, frozenset)) else None
        if listed is None or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in listed):
            raise ValueError(f"rows must be a count >= 0 or row indices >= 0, got {rows!r}")
        #: the env rows whose images are kept
        self.rows = set(listed)
        #: env row -> its images, in the order the env wrote them
        self.frames: dict[int, list[torch.Tensor]] = {}

    def observe(self, td: TensorDictBase) -> None:
        """Keep the images of the kept rows present in ``td`` (an env's reset or step output)."""
        if not self.rows or IMAGE not in td.keys():
            return
        index = td.get(ENV_INDEX).reshape(-1).tolist()
        images = td.get(IMAGE)
        for r, row in enumerate(index):
            if row in self.rows:
                self.frames.setdefault(int(row), []).append(images[r].detach().to("cpu", torch.uint8).clone())


def _check_frames(frames: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if len(frames) == 0:
        raise ValueError("an episode needs at least one frame")
    out = []
    for k, f in enumerate(frames):
        t = torch.as_tensor(f)
        if t.dim() != 3 or t.shape[0] != 3 or t.dtype != torch.uint8:
            raise ValueError(f"frame {k} must be a uint8 [3, H, W] image, got {t.dtype} {tuple(t.shape)}")
        out.append(t.cpu())
    return out


def frame_strip(frames: Sequence[torch.Tensor], gap: int = 4) -> torch.Tensor:
    """The frames side by side, top-aligned, ``gap`` white pixels apart: uint8 ``[3, max H, sum W + gaps]``.

    Example:
        >>> import torch
        >>> strip = frame_strip([torch.zeros(3, 2, 2, dtype=torch.uint8), torch.ones(3, 3, 1, dtype=torch.uint8)], gap=1)
        >>> strip[0].tolist()
        [[0, 0, 255, 1], [0, 0, 255, 1], [255, 255, 255, 1]]
    """
    frames = _check_frames(frames)
    if gap < 0:
        raise ValueError(f"gap must be >= 0, got {gap}")
    height = max(f.shape[1] for f in frames)
    width = sum(f.shape[2] for f in frames) + gap * (len(frames) - 1)
    strip = torch.full((3, height, width), 255, dtype=torch.uint8)
    x = 0
    for f in frames:
        strip[:, : f.shape[1], x : x + f.shape[2]] = f
        x += f.shape[2] + gap
    return strip


def _with_turn_bar(frame: torch.Tensor, turn: int, turns: int, bar_px: int) -> torch.Tensor:
    """``frame`` with a ``bar_px`` high bar below it, filled ``(turn + 1) / turns`` of the way."""
    if bar_px == 0:
        return frame
    _, h, w = frame.shape
    bar = torch.tensor(_BAR_OFF, dtype=torch.uint8).view(3, 1, 1).repeat(1, bar_px, w)
    filled = max(1, round(w * (turn + 1) / turns))
    bar[:, :, :filled] = torch.tensor(_BAR_ON, dtype=torch.uint8).view(3, 1, 1)
    return torch.cat([frame, bar], dim=1)


def _palette_images(frames: list[torch.Tensor]):
    """Pillow ``P`` images of the frames sharing one exact palette (at most 256 colours overall),
    or ``None`` when the frames hold more colours than a GIF palette."""
    from PIL import Image

    flat = torch.cat([f.permute(1, 2, 0).reshape(-1, 3) for f in frames])
    colours, inverse = torch.unique(flat, dim=0, return_inverse=True)
    if colours.shape[0] > 256:
        return None
    palette = colours.reshape(-1).tolist()
    out, start = [], 0
    for f in frames:
        n = f.shape[1] * f.shape[2]
        index = inverse[start : start + n].to(torch.uint8).reshape(f.shape[1], f.shape[2])
        start += n
        img = Image.fromarray(index.numpy(), mode="P")
        img.putpalette(palette)
        out.append(img)
    return out


def save_episode(
    frames: Sequence[torch.Tensor],
    path: str | os.PathLike,
    *,
    frame_ms: int = 600,
    turn_bar_px: int = 4,
    gap: int = 4,
) -> Path:
    """Write an episode's frames as an animated GIF (``.gif``) or a PNG strip (``.png``); returns the path.

    GIF: one frame per observation, shown ``frame_ms`` ms each, looping. Each is the env's image
    (top ``H`` rows, pixel-exact while the episode has at most 256 colours, as board renderings
    do; more colours are quantised by Pillow) with a ``turn_bar_px`` high turn bar below it.
    The bar also keeps a frame that repeats the previous board (a move into a wall) a frame of
    its own: GIF writers merge identical consecutive frames (``turn_bar_px=0``: no bar, and such
    frames merge). PNG: :func:`frame_strip` with ``gap``.

    Raises:
        ValueError: no frame, a frame that is not uint8 ``[3, H, W]``, frames of different sizes
            in a GIF, an unknown suffix, ``frame_ms < 1`` or a negative ``turn_bar_px`` / ``gap``.
    """
    from PIL import Image

    frames = _check_frames(frames)
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in DUMP_FORMATS:
        raise ValueError(f"cannot write {path}: the episode dump must end with one of {', '.join(DUMP_FORMATS)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".png":
        Image.fromarray(frame_strip(frames, gap).permute(1, 2, 0).numpy(), mode="RGB").save(path)
        return path
    if isinstance(frame_ms, bool) or not isinstance(frame_ms, int) or frame_ms < 1:
        raise ValueError(f"frame_ms must be an integer >= 1, got {frame_ms!r}")
    if isinstance(turn_bar_px, bool) or not isinstance(turn_bar_px, int) or turn_bar_px < 0:
        raise ValueError(f"turn_bar_px must be an integer >= 0, got {turn_bar_px!r}")
    if len({tuple(f.shape) for f in frames}) > 1:
        raise ValueError(f"GIF frames must share one size, got {sorted({tuple(f.shape) for f in frames})}")
    shown = [_with_turn_bar(f, k, len(frames), turn_bar_px) for k, f in enumerate(frames)]
    images = _palette_images(shown)
    if images is None:
        images = [Image.fromarray(f.permute(1, 2, 0).numpy(), mode="RGB") for f in shown]
    images[0].save(path, save_all=True, append_images=images[1:], duration=frame_ms, loop=0, optimize=False)
    return path

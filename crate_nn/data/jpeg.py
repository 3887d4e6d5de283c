"""JPEG decoding on a GPU (nvJPEG, through ``torchvision.io.decode_jpeg``) for packing shards: ``crate-pack --decode gpu``.

torchvision is optional: `available` says whether it can be imported, and nothing here imports it before a
decoder runs. DataLoader workers only read the files' bytes; the main process decodes them in batches on the
device, resizes each image's shorter side to ``resize`` (bilinear with antialiasing, Pillow's filter) and keeps
the central ``crop`` square — the geometry `crate_nn.data.images.ImageFiles` gives — then copies the uint8
result back. A file nvJPEG cannot decode (PNG, CMYK, a broken file) is decoded by Pillow instead, and reported
only if Pillow cannot read it either. nvJPEG's inverse DCT and chroma upsampling differ from libjpeg's, so pixels
differ from a Pillow pack by a few grey levels (`tests/gpu` bounds the difference).
"""
from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from .batching import Corrupt
from .images import ImageFiles
from .shards import Decoder, Geometry


def available() -> bool:
    """Whether torchvision (and so ``decode_jpeg``) is importable."""
    return importlib.util.find_spec("torchvision") is not None


class FileBytes(Dataset):
    """The raw bytes of each file as a 1-D uint8 tensor (what ``decode_jpeg`` takes)."""

    def __init__(self, paths: Sequence[str]):
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        data = Path(self.paths[i]).read_bytes()
        return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


def resize_center_crop(image: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """(C, H, W) uint8 → (C, crop, crop) uint8: shorter side to ``geometry.resize`` (the output size rounded as
    `ImageFiles` rounds it), bilinear with antialiasing, then the central square."""
    h, w = image.shape[-2:]
    scale = geometry.resize / min(h, w)
    size = (max(geometry.resize, round(h * scale)), max(geometry.resize, round(w * scale)))
    resized = F.interpolate(image[None].float(), size=size, mode="bilinear", antialias=True, align_corners=False)[0]
    top, left = (size[0] - geometry.crop) // 2, (size[1] - geometry.crop) // 2
    square = resized[:, top:top + geometry.crop, left:left + geometry.crop]
    return square.round_().clamp_(0, 255).to(torch.uint8)


def nvjpeg_decoder(device: str | torch.device = "cuda", workers: int = 4, batch_size: int = 128) -> Decoder:
    """A `crate_nn.data.shards.Decoder` decoding with nvJPEG on ``device`` (``"cpu"`` uses libjpeg-turbo through
    torchvision, for comparison)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    device = torch.device(device)

    def decode_one(path: str, data: torch.Tensor, geometry: Geometry) -> torch.Tensor | str:
        try:
            return resize_center_crop(decode_jpeg(data, mode=ImageReadMode.RGB, device=device), geometry).cpu()
        except (RuntimeError, ValueError):
            item = ImageFiles([(path, 0)], ["all"], train=False, image_size=geometry.crop, load_size=geometry.resize,
                              eval_resize=geometry.resize)[0]
            return item.reason if isinstance(item, Corrupt) else item[0]

    def decode(groups: Sequence[Sequence[str]], geometry: Geometry) -> Iterator[tuple[np.ndarray, dict[int, str]]]:
        files = [path for group in groups for path in group]
        if not files:
            return
        batches = iter(DataLoader(FileBytes(files), batch_size=batch_size, num_workers=workers, collate_fn=list))
        pending: list[torch.Tensor] = []
        position = 0
        for group in groups:
            images, failed = [], {}
            for j, _ in enumerate(group):
                if not pending:
                    pending = next(batches)
                    try:  # one batched nvJPEG call; a file it rejects sends the batch through decode_one
                        decoded = decode_jpeg(pending, mode=ImageReadMode.RGB, device=device)
                        pending = list(torch.stack([resize_center_crop(image, geometry) for image in decoded]).cpu())
                    except (RuntimeError, ValueError):
                        pending = [decode_one(files[position + k], data, geometry) for k, data in enumerate(pending)]
                result = pending.pop(0)
                position += 1
                if isinstance(result, str):
                    failed[j] = result
                else:
                    images.append(result.numpy())
            empty = np.zeros((0, 3, geometry.crop, geometry.crop), np.uint8)
            yield (np.stack(images) if images else empty), failed

    return decode

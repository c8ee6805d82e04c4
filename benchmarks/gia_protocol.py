"""Print the seed 004 §6.4 protocol SSIMs (the numbers behind tests/.../test_protocol.py).

Usage: ``PYTHONPATH=. python benchmarks/gia_protocol.py --images 4`` (one CPU thread; about 10 s of CPU per
attack with 4 images).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from fixtures.protocol import protocol_attack, protocol_runs


def main() -> None:
    """Run the six protocol attacks and print mean/max SSIM per setting as JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, attack, model in protocol_runs():
        start = time.process_time()
        ssim = protocol_attack(model, attack, args.images)
        print(
            json.dumps(
                {
                    "model": name,
                    "attack": attack,
                    "images": args.images,
                    "ssim_mean": round(sum(ssim) / len(ssim), 3),
                    "ssim_max": round(max(ssim), 3),
                    "asr": sum(s >= 0.5 for s in ssim) / len(ssim),
                    "per_image": [round(s, 3) for s in ssim],
                    "cpu_s": round(time.process_time() - start, 1),
                }
            )
        )


if __name__ == "__main__":
    main()

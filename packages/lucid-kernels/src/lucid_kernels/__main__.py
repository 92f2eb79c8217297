"""``python -m lucid_kernels``: show what each kernel guards, on this machine's device."""

from __future__ import annotations

import torch

from lucid_kernels import SpatialAttention, capacity_report, host_split, pad_to_capacity


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"lucid-kernels on {device}, torch {torch.__version__}")

    torch.manual_seed(0)
    block = SpatialAttention(256).to(device).eval()
    x = torch.randn(1, 256, 20, 20, device=device) * 100  # logits beyond float16's 65504
    with torch.no_grad():
        for island in (False, True):
            block.float32_island = island
            with torch.autocast(device, dtype=torch.float16):
                out = block(x)
            state = "finite" if bool(out.isfinite().all()) else "NON-FINITE"
            switch = "on " if island else "off"
            print(f"  attention under fp16 autocast, float32 island {switch}: {state}")

    pieces = [torch.rand(2, 17, 2, device=device), torch.empty(0, 0, 2, device=device)]
    shapes = [tuple(p.shape) for p in host_split(pieces)]
    print(f"  host split of keypoints (one transfer): {shapes}")

    boxes = [torch.rand(n, 4, device=device) for n in (3, 0, 7)]
    report = capacity_report([len(b) for b in boxes], capacity=5)
    print(f"  padding to capacity 5: fits={report.fits}, over capacity by {report.overflow}")
    padded = pad_to_capacity(boxes, capacity=8)
    print(f"  padded to 8: values {tuple(padded.values.shape)}, counts {padded.counts.tolist()}")


if __name__ == "__main__":
    main()

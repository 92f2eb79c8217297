"""``python -m lucid_kernels``: show what each kernel guards, on this machine's device."""

from __future__ import annotations

import torch

from lucid_kernels import attention_weights, capacity_report, host_split, pad_to_capacity


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"lucid-kernels on {device}, torch {torch.__version__}")

    torch.manual_seed(0)
    # Logits q^T k summed over 64 products of about 100 x 100: far beyond float16's 65504.
    q, k = (torch.randn(1, 2, 64, 400, device=device) * 100 for _ in range(2))
    with torch.autocast(device, dtype=torch.float16):
        plain = ((q.transpose(-2, -1) @ k) * 64**-0.5).softmax(-1)
        island = attention_weights(q, k, 64**-0.5)
    for name, weights in (("off", plain), ("on ", island)):
        state = "finite" if bool(weights.isfinite().all()) else "NON-FINITE"
        print(f"  attention weights under fp16 autocast, float32 island {name}: {state}")

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

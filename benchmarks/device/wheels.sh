#!/usr/bin/env bash
# The wheels a GPU machine without network needs (Python 3.12, torch, torchvision and Lightning
# preinstalled), downloaded on a machine with network into folders git ignores, which a device
# call carries: .whl (the GPU session: nox, pytest-xdist, pycocotools, the CLI's jsonargparse,
# hypothesis), .whl-peer (Ultralytics 8.4.190 and what it needs beyond the machine's own packages:
# shared/reference/ultralytics-peer.md section 7), .whl-zoo (timm, for the capture zoo's tests),
# .whl-vs (vision-synth and its Pillow, which build the held-out sets there).
#
#     bash benchmarks/device/wheels.sh        # then carry: [".whl", ".whl-peer", ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
for d in .whl .whl-peer .whl-zoo .whl-vs; do
  grep -qxF "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude
done
get() {
  local dir=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 -d "$dir" "$@"
}
# jsonargparse, docstring-parser and typeshed-client serve the lucid command (LightningCLI: without
# them the CLI tests and the killed-fit chain do not import); tensorboardx and protobuf write
# TensorBoard events; faster-coco-eval scores validation (pycocotools encodes masks and is the
# reference); hypothesis is for the reader fuzz tests, collected there too; pytest 9.1.1 as the
# dev group pins it (on 9.2 pytest-xdist 3.8's --dist=loadgroup stops grouping,
# tests/workspace/test_xdist_groups.py).
get .whl nox==2026.10.20 argcomplete colorlog dependency-groups distlib platformdirs \
  python-discovery virtualenv pytest-timeout pytest-xdist execnet sortedcontainers attrs \
  jsonargparse docstring-parser typeshed-client tensorboardx pytest==9.1.1 \
  pycocotools==2.0.11 faster-coco-eval==1.7.2 protobuf hypothesis==6.170.17
# polars 1.31.0: the last single-wheel polars (the reference's section 7 says why)
get .whl-peer ultralytics==8.4.190 ultralytics-thop==2.2.3 ultralytics-platform==0.1.99 \
  polars==1.31.0 nvidia-ml-py==13.615.71 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 \
  anyio==4.16.0 typing_extensions==4.16.0
get .whl-zoo timm==1.0.31
get .whl-vs vision-synth==0.14.0.dev0 pillow==13.0.0
du -sh .whl .whl-peer .whl-zoo .whl-vs

"""The AWS Deep Learning AMIs (DLAMIs) hpcc builds on: their owner, the families a config may name and each one's
login user and image name pattern, per architecture. The config's model (infra/config/model.py), its rules, the
program's lookups, preflight and the plan's embedded AWS read them."""

from __future__ import annotations

DLAMI_OWNER = "898082745236"
IMAGE_FAMILIES = {
    # family -> (SSM parameter path segment, login user, image name pattern)
    "base-oss-nvidia-driver-gpu-ubuntu-22.04": (
        "ubuntu",
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
    ),
    "base-oss-nvidia-driver-gpu-ubuntu-24.04": (
        "ubuntu",
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *",
    ),
    "base-oss-nvidia-driver-gpu-amazon-linux-2023": (
        "ec2-user",
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Amazon Linux 2023) *",
    ),
}
# Families AWS also builds for arm64 (Graviton: G5g, P6e-GB200; DLAMI release notes, "Deep Learning ARM64 Base OSS
# Nvidia Driver GPU AMI (Ubuntu 22.04 / 24.04)"), with their image names; the public parameters take the
# architecture in the path (/aws/service/deeplearning/ami/<arch>/<family>/latest/ami-id).
ARM64_IMAGE_NAMES = {
    "base-oss-nvidia-driver-gpu-ubuntu-22.04": "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
    "base-oss-nvidia-driver-gpu-ubuntu-24.04": "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *",
}


def image_name_pattern(family: str, arch: str) -> str | None:
    """The DLAMI name pattern of a family for an architecture; None where AWS builds none."""
    return IMAGE_FAMILIES[family][1] if arch == "x86_64" else ARM64_IMAGE_NAMES.get(family) if arch == "arm64" else None

"""How long a container image takes to start on N nodes at once (issue 35's figures), computed from AWS's documented
rates where AWS documents one and from named, overridable assumptions (`Assumptions`) where it does not.
scripts/figures_image_start.py prints the figures; README, Benchmark, lists them with these sources.

The path modelled is hpcc's (hpcc_node/containers/cache.py, infra/render/containers.py):
- cold: the first node imports the image once (enroot import: download the layers from the registry, unpack them,
  mksquashfs, write the squashfs to the cache on FSx) while the others wait for it; then every node reads the
  squashfs from FSx and pyxis' `enroot create` unpacks it into the node's local enroot data directory (hpcc sets no
  pyxis `use_squashfuse`, so the whole squashfs is read and unpacked: `read_share` 1.0). With `use_squashfuse=1`
  (pyxis >= 0.22) a node would read only what the job touches: `Assumptions(read_share=...)`.
- warm: the squashfs is already in the cache: the same minus the import.
- prewarmed: the node holds the squashfs on its local NVMe (a spare or replacement prewarmed for a requeued job): it
  reads local NVMe and unpacks; no registry, no FSx.

Documented (each constant names its page):
- FSx for Lustre SSD, per TiB provisioned: network throughput (baseline, burst), the file servers' in-memory cache,
  disk throughput (baseline, burst): "Performance characteristics of SSD and HDD storage classes",
  https://docs.aws.amazon.com/fsx/latest/LustreGuide/ssd-storage.html. PERSISTENT_2's per-unit throughputs (125,
  250, 500, 1000 MB/s/TiB): https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-throughput-capacity.html.
  Burst uses "a network I/O credit mechanism" (credits accrue below baseline): the figures use the baseline unless
  asked for burst.
- One TCP flow: "Baseline bandwidth for single-flow traffic is limited to 5 Gbps when instances are not in the same
  cluster placement group" (the registry's S3 and the file servers never are), "Amazon EC2 instance network
  bandwidth", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html.
- A node's network card: DescribeInstanceTypes' NetworkCards[].BaselineBandwidthInGbps (a p5.48xlarge: 32 cards of
  100 Gbps; TCP traffic, Lustre's included, leaves through the primary interface on card 0).

Not documented (so assumed, each in `Assumptions` with its reason): ECR's download rate per layer (its quotas,
https://docs.aws.amazon.com/AmazonECR/latest/userguide/service-quotas.html, are request rates, not bandwidth; one
import makes one BatchGetImage and one GetDownloadUrlForLayer a layer, far below the 2,000/s and 3,000/s per
Region); how many flows a Lustre client reads one file over; unpack, mksquashfs and unsquashfs rates (CPU-bound);
the p5's instance-store NVMe throughput (EC2 publishes no figure for it); the squashfs' and the layers' size
against the image's unpacked size; the share of the image a lazily mounted container reads.

Units: AWS's MB/s are 10^6 bytes a second; an image's GB 10^9 bytes; FSx capacity is GiB as the stack file gives it,
its TiB for throughput FSx's own (1,200 GiB is "1.2 TiB": `Fsx.tib`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

MB = 1e6
GB = 1e9
GIB = 1024**3

SSD_STORAGE = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/ssd-storage.html"
NETWORK_BANDWIDTH = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html"

# The targets: a 20 GB image on 512 nodes at once.
TARGET_IMAGE_GB = 20.0
TARGET_NODES = 512
COLD_TARGET_S = 180.0
WARM_TARGET_S = 30.0

# EC2 (NETWORK_BANDWIDTH): one 5-tuple flow to anything outside the node's cluster placement group, 5 Gbps.
SINGLE_FLOW_MBPS = 5_000 / 8
P5_CARD_GBPS = 100.0  # DescribeInstanceTypes, p5.48xlarge: NetworkCards[0].BaselineBandwidthInGbps


@dataclass(frozen=True)
class FsxTier:
    """One row of SSD_STORAGE's table, per TiB provisioned. A None burst: that tier has no burst (its baseline)."""

    name: str
    network_mbps: float
    network_burst_mbps: float | None
    cache_gib: float  # the file servers' RAM
    disk_mbps: float
    disk_burst_mbps: float | None


# SSD_STORAGE, "File system performance for SSD storage options". SCRATCH_2's disk: 200 read (100 write).
FSX_TIERS: dict[tuple[str, int | None], FsxTier] = {
    ("SCRATCH_2", None): FsxTier("SCRATCH_2", 200, 1300, 6.7, 200, None),
    ("PERSISTENT_2", 125): FsxTier("PERSISTENT_2-125", 320, 1300, 3.4, 125, 500),
    ("PERSISTENT_2", 250): FsxTier("PERSISTENT_2-250", 640, 1300, 6.8, 250, 500),
    ("PERSISTENT_2", 500): FsxTier("PERSISTENT_2-500", 1300, None, 13.7, 500, None),
    ("PERSISTENT_2", 1000): FsxTier("PERSISTENT_2-1000", 2600, None, 27.3, 1000, None),
}
SCRATCH_2_WRITE_MBPS = 100  # SSD_STORAGE: SCRATCH_2's disk writes at half its reads


def fsx_tier(deployment_type: str, per_unit_throughput: int | None) -> FsxTier | None:
    """The tier of a stack file's fsx section, or None for one the table does not cover (SCRATCH_1, PERSISTENT_1,
    HDD): no figure for those."""
    key = (deployment_type, None if deployment_type.startswith("SCRATCH") else per_unit_throughput)
    return FSX_TIERS.get(key)


@dataclass(frozen=True)
class Fsx:
    capacity_gib: int
    tier: FsxTier
    burst: bool = False  # the network burst, while the file system has credits (figures use the baseline)

    @property
    def tib(self) -> float:
        """FSx's own arithmetic: "a 2.4-TiB file system" is 2,400 GiB (CreateFileSystem's PerUnitStorageThroughput:
        "For a 2.4-TiB file system, provisioning 50 MB/s/TiB ... yields 120 MB/s")."""
        return self.capacity_gib / 1000

    @property
    def network_mbps(self) -> float:
        per_tib = (
            self.tier.network_burst_mbps if self.burst and self.tier.network_burst_mbps else self.tier.network_mbps
        )
        return self.tib * per_tib

    @property
    def disk_read_mbps(self) -> float:
        per_tib = self.tier.disk_burst_mbps if self.burst and self.tier.disk_burst_mbps else self.tier.disk_mbps
        return self.tib * per_tib

    @property
    def disk_write_mbps(self) -> float:
        return self.tib * SCRATCH_2_WRITE_MBPS if self.tier.name == "SCRATCH_2" else self.disk_read_mbps

    @property
    def cache_bytes(self) -> float:
        return self.tib * self.tier.cache_gib * GIB


@dataclass(frozen=True)
class Assumptions:
    """What AWS and NVIDIA document no rate for. Override any (`Assumptions(registry_flow_mbps=300)`) with a real
    cluster's measurement; the defaults are chosen on the slow side of what such hardware does."""

    # Sizes against the image's unpacked size (the "20 GB"): its compressed layers in the registry and the squashfs
    # the cache keeps (zstd, hpcc_node's importer) are each about half of it for CUDA/PyTorch images (NGC's PyTorch
    # images list about half their unpacked size as their compressed size); the largest layer a quarter of the
    # compressed bytes (enroot downloads layers in parallel, one flow each, so the largest layer's flow binds).
    layers_share: float = 0.5
    squashfs_share: float = 0.5
    largest_layer_share: float = 0.25
    # One layer's download from ECR (S3 behind it, through the VPC's S3 gateway endpoint): not documented; the
    # documented ceiling is SINGLE_FLOW_MBPS (625 MB/s). Assumed 100 MB/s, well under it.
    registry_flow_mbps: float = 100.0
    # enroot import's layer extraction (tar, zstd) and mksquashfs over every core, of unpacked bytes, into local NVMe.
    import_unpack_mbps: float = 1_000.0
    mksquashfs_mbps: float = 1_000.0
    # pyxis' `enroot create`: unsquashfs into the local data directory, of unpacked bytes (CPU and NVMe writes).
    unsquashfs_mbps: float = 2_000.0
    # A p5's instance-store NVMe read (one drive, the prewarmed squashfs): EC2 publishes no throughput for it.
    nvme_read_mbps: float = 2_000.0
    # The flows one Lustre client reads one squashfs over (one a file server its stripes are on); each is held to
    # SINGLE_FLOW_MBPS. Lustre's layout of the cache's files decides it; 8 assumed (a multi-GB file over 8 OSTs).
    client_flows: int = 8
    # The share of the squashfs a node reads before the job runs: 1.0 with `enroot create` (hpcc's pyxis today);
    # with pyxis' use_squashfuse only what starting the job touches (not documented anywhere; measure it).
    read_share: float = 1.0
    # enroot start: namespaces, mounts, the hooks (NVIDIA's, PMIx's): a few seconds.
    setup_s: float = 2.0


ASSUMED = Assumptions()


class Figure(NamedTuple):
    seconds: float
    bottleneck: str  # what binds, in words


def node_read_mbps(card_gbps: float, a: Assumptions = ASSUMED) -> float:
    """One node's Lustre read: its primary card's bandwidth, or its flows' (each SINGLE_FLOW_MBPS), the lower."""
    return min(card_gbps * 1000 / 8, a.client_flows * SINGLE_FLOW_MBPS)


def import_time(image_gb: float, fsx: Fsx, card_gbps: float, connections: int = 10, a: Assumptions = ASSUMED) -> Figure:
    """One node's `enroot import` into the cache: download every layer (`connections` at once, enroot's
    ENROOT_MAX_CONNECTIONS), then unpack them, mksquashfs, and write the squashfs to FSx: one stage after another."""
    layers = image_gb * GB * a.layers_share
    download = max(
        layers / (connections * a.registry_flow_mbps * MB),
        layers * a.largest_layer_share / (a.registry_flow_mbps * MB),
    )
    unpack = image_gb * GB / (a.import_unpack_mbps * MB)
    squash = image_gb * GB / (a.mksquashfs_mbps * MB)
    write = image_gb * GB * a.squashfs_share / (min(node_read_mbps(card_gbps, a), fsx.disk_write_mbps) * MB)
    stages = {"registry download": download, "unpack": unpack, "mksquashfs": squash, "write to FSx": write}
    return Figure(sum(stages.values()), max(stages, key=stages.__getitem__))


def read_time(image_gb: float, nodes: int, fsx: Fsx, card_gbps: float, a: Assumptions = ASSUMED) -> Figure:
    """`nodes` reading the same squashfs from FSx at once: the file system's network throughput, its disks' when the
    squashfs does not fit its servers' cache (then every node's read reaches the disks), or each node's own read."""
    each = image_gb * GB * a.squashfs_share * a.read_share
    cached = image_gb * GB * a.squashfs_share <= fsx.cache_bytes
    bounds = {
        f"FSx network ({fsx.network_mbps:,.0f} MB/s)": nodes * each / (fsx.network_mbps * MB),
        f"a node's read ({node_read_mbps(card_gbps, a):,.0f} MB/s)": each / (node_read_mbps(card_gbps, a) * MB),
    }
    if not cached:
        bounds[f"FSx disks ({fsx.disk_read_mbps:,.0f} MB/s; the squashfs exceeds the servers' cache)"] = (
            nodes * each / (fsx.disk_read_mbps * MB)
        )
    binding = max(bounds, key=bounds.__getitem__)
    return Figure(bounds[binding], binding)


def _unpack(image_gb: float, a: Assumptions) -> float:
    """`enroot create`: every unpacked byte written locally (none with squashfuse: the job reads lazily)."""
    return image_gb * GB / (a.unsquashfs_mbps * MB) if a.read_share >= 1.0 else 0.0


def warm_start(image_gb: float, nodes: int, fsx: Fsx, card_gbps: float, a: Assumptions = ASSUMED) -> Figure:
    """The squashfs in the cache: each node reads it and unpacks it as it reads (the slower binds), then starts."""
    read = read_time(image_gb, nodes, fsx, card_gbps, a)
    unpack = _unpack(image_gb, a)
    if unpack > read.seconds:
        return Figure(unpack + a.setup_s, f"unsquashfs ({a.unsquashfs_mbps:,.0f} MB/s, assumed)")
    return Figure(read.seconds + a.setup_s, read.bottleneck)


def cold_start(
    image_gb: float, nodes: int, fsx: Fsx, card_gbps: float, connections: int = 10, a: Assumptions = ASSUMED
) -> Figure:
    """Nobody has the image: one import, the other nodes waiting for it, then the warm start on every node."""
    imp = import_time(image_gb, fsx, card_gbps, connections, a)
    warm = warm_start(image_gb, nodes, fsx, card_gbps, a)
    binding = f"import ({imp.bottleneck})" if imp.seconds > warm.seconds else warm.bottleneck
    return Figure(imp.seconds + warm.seconds, binding)


def prewarmed_start(image_gb: float, a: Assumptions = ASSUMED) -> Figure:
    """A spare or replacement holding the squashfs on local NVMe: read it there and unpack; no registry, no FSx."""
    read = image_gb * GB * a.squashfs_share * a.read_share / (a.nvme_read_mbps * MB)
    unpack = _unpack(image_gb, a)
    if unpack >= read:
        return Figure(unpack + a.setup_s, f"unsquashfs ({a.unsquashfs_mbps:,.0f} MB/s, assumed)")
    return Figure(read + a.setup_s, f"local NVMe ({a.nvme_read_mbps:,.0f} MB/s, assumed)")


# FSx's capacities for SSD: 1,200 and 2,400 GiB, then steps of 2,400 (SCRATCH_2, PERSISTENT_2), at most 512 TiB
# (infra/config/validators/config_rules.py fsx_capacity holds the same rule for the stack file).
CAPACITY_STEP_GIB = 2400
MAX_CAPACITY_GIB = 524_288


def capacities() -> list[int]:
    return [1200, *range(CAPACITY_STEP_GIB, MAX_CAPACITY_GIB + 1, CAPACITY_STEP_GIB)]


def capacity_needed(
    tier: FsxTier,
    image_gb: float,
    nodes: int,
    target_s: float,
    card_gbps: float,
    *,
    warm: bool = False,
    a: Assumptions = ASSUMED,
) -> int | None:
    """The smallest FSx capacity (GiB) of this tier whose cold (or warm) start meets target_s, or None if none does
    (the import alone, or a node's own read, is over it)."""
    for gib in capacities():
        fsx = Fsx(gib, tier)
        got = (
            warm_start(image_gb, nodes, fsx, card_gbps, a) if warm else cold_start(image_gb, nodes, fsx, card_gbps, a=a)
        )
        if got.seconds <= target_s:
            return gib
    return None

"""infra/facts/image_start.py: the image-start figures (issue 35), each value from a hand calculation in the comments.
A 20 GB image: 10 GB of layers and a 10 GB squashfs (the shares 0.5); a p5's card 0 is 100 Gbps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infra.facts import image_start as m

P250 = m.FSX_TIERS["PERSISTENT_2", 250]
P1000 = m.FSX_TIERS["PERSISTENT_2", 1000]
FSX_48 = m.Fsx(48000, P250)  # 48 TiB at 250 MB/s/TiB


def test_tiers_follow_the_stack_file():
    assert m.fsx_tier("PERSISTENT_2", 250) is P250
    assert m.fsx_tier("SCRATCH_2", None) is m.FSX_TIERS["SCRATCH_2", None]
    assert m.fsx_tier("SCRATCH_1", None) is None  # not in the SSD table: no figure
    assert m.fsx_tier("PERSISTENT_1", 200) is None


def test_fsx_throughput_is_capacity_times_rate():
    # 48,000 GiB is FSx's "48 TiB"; network 48 x 640 = 30,720 MB/s; disk 48 x 250 = 12,000; burst 48 x 1,300
    assert FSX_48.network_mbps == pytest.approx(30_720)
    assert FSX_48.disk_read_mbps == pytest.approx(12_000)
    assert replace(FSX_48, burst=True).network_mbps == pytest.approx(62_400)
    assert m.Fsx(1200, m.FSX_TIERS["SCRATCH_2", None]).disk_write_mbps == pytest.approx(120)  # 1.2 x 100


def test_a_node_reads_at_its_card_or_its_flows():
    # 8 flows x 625 MB/s (5 Gbps each) = 5,000 < 100 Gbps / 8 = 12,500; a 25 Gbps card: 3,125
    assert m.node_read_mbps(100) == pytest.approx(5_000)
    assert m.node_read_mbps(25) == pytest.approx(3_125)


def test_import():
    # download: max(10 GB / (10 x 100 MB/s) = 10 s, largest layer 2.5 GB / 100 MB/s = 25 s) = 25 s; unpack 20 GB at
    # 1,000 MB/s 20 s; mksquashfs 20 s; write 10 GB at min(5,000, 12,000) MB/s 2 s: 67 s
    got = m.import_time(20, FSX_48, 100)
    assert got.seconds == pytest.approx(67)
    assert got.bottleneck == "registry download"


def test_cold_and_warm_at_512_nodes():
    # 512 x 10 GB = 5.12 TB at 30,720 MB/s = 166.67 s (a node's own 10 GB at 5,000 MB/s: 2 s; its unsquashfs 20 GB
    # at 2,000 MB/s: 10 s, overlapped); + 2 s setup = 168.67 s warm; + 67 s import = 235.67 s cold
    warm = m.warm_start(20, 512, FSX_48, 100)
    assert warm.seconds == pytest.approx(168.67, abs=0.01)
    assert warm.bottleneck.startswith("FSx network")
    cold = m.cold_start(20, 512, FSX_48, 100)
    assert cold.seconds == pytest.approx(235.67, abs=0.01)
    assert cold.seconds > m.COLD_TARGET_S


def test_one_node_is_bound_by_its_unpack():
    # 10 GB read in 2 s, 20 GB unpacked in 10 s: 10 + 2 s
    got = m.warm_start(20, 1, FSX_48, 100)
    assert got.seconds == pytest.approx(12)
    assert got.bottleneck.startswith("unsquashfs")


def test_disks_bind_when_the_squashfs_exceeds_the_servers_cache():
    # 1.2 TiB PERSISTENT_2-125: cache 1.2 x 3.4 GiB = 4.4 GB < 10 GB; disks 150 MB/s < network 384:
    # 512 x 10 GB / 150 MB/s = 34,133 s
    got = m.read_time(20, 512, m.Fsx(1200, m.FSX_TIERS["PERSISTENT_2", 125]), 100)
    assert got.seconds == pytest.approx(34_133, abs=1)
    assert got.bottleneck.startswith("FSx disks")


def test_prewarmed_spare():
    # local NVMe 10 GB at 2,000 MB/s 5 s, unsquashfs 10 s: 10 + 2 s, the one-node warm start's 12 s
    got = m.prewarmed_start(20)
    assert got.seconds == pytest.approx(12)
    assert got.seconds == pytest.approx(m.warm_start(20, 1, FSX_48, 100).seconds)


def test_lazy_mount_reads_a_share_and_unpacks_nothing():
    lazy = replace(m.ASSUMED, read_share=0.25)
    # 2.5 GB at 5,000 MB/s = 0.5 s + 2 s; 512 nodes: 512 x 2.5 GB / 30,720 MB/s = 41.67 s + 2 s
    assert m.warm_start(20, 1, FSX_48, 100, lazy).seconds == pytest.approx(2.5)
    assert m.warm_start(20, 512, FSX_48, 100, lazy).seconds == pytest.approx(43.67, abs=0.01)
    assert m.prewarmed_start(20, lazy).seconds == pytest.approx(3.25)  # 2.5 GB at 2,000 MB/s + 2 s


def test_capacity_needed():
    # cold <= 180 s at PERSISTENT_2-1000: 180 - 67 import - 2 setup = 111 s for 5.12 TB: 46.1 GB/s, / 2,600 MB/s
    # a TiB = 17.7 TiB; the next valid capacity, a multiple of 2,400 GiB: 19,200
    assert m.capacity_needed(P1000, 20, 512, 180, 100) == 19_200
    assert m.capacity_needed(P1000, 20, 512, 180, 100) - 2400 < 17_740
    # warm <= 30 s at 125 MB/s/TiB: 5.12 TB in 28 s needs 183 GB/s, 571 TiB at 320 MB/s/TiB: over 512 TiB
    assert m.capacity_needed(m.FSX_TIERS["PERSISTENT_2", 125], 20, 512, 30, 100, warm=True) is None
    # the import alone is over a 60 s target: no capacity helps
    assert m.capacity_needed(P1000, 20, 1, 60, 100) is None


def test_capacities_are_fsx_valid():
    caps = m.capacities()
    assert caps[:3] == [1200, 2400, 4800] and caps[-1] <= m.MAX_CAPACITY_GIB
    assert all(c % 2400 == 0 for c in caps[1:])

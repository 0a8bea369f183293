"""What containers see of their node (hpcc_contract/container_mounts.py): one list, rendered as enroot's mounts.d fstab
and as OCI spec mounts; the box's Slurm-native containers run with the latter (tests/box/test_box_containers.py)."""

from __future__ import annotations

import pytest

from hpcc_contract.container_mounts import (
    EFA_DEVICES,
    EFA_LIBFABRIC,
    HPCC_ETC,
    container_mounts,
    oci_mounts,
    render_enroot_mounts,
)


def test_the_cluster_file_system_is_writable_and_the_launch_files_read_only():
    fstab = render_enroot_mounts(container_mounts("/scratch"))
    lines = [line.split() for line in fstab.splitlines()]
    assert lines[0] == ["/scratch", "/scratch", "none", "x-create=dir,rbind,rw"]
    assert lines[1] == [HPCC_ETC, HPCC_ETC, "none", "x-create=dir,rbind,ro"]
    # a node without EFA starts containers all the same: enroot skips an absent source marked nofail
    assert [line[3].endswith(",nofail,silent") for line in lines] == [False, False, True, True]
    assert {line[0] for line in lines[2:]} == {EFA_DEVICES, EFA_LIBFABRIC}


def test_the_oci_mounts_are_the_same_list_less_what_the_node_lacks():
    mounts = container_mounts("/fsx")
    every = oci_mounts(mounts)
    assert [(m["source"], m["destination"], m["options"]) for m in every] == [
        (m.source, m.target, ["rbind", "rw" if m.writable else "ro"]) for m in mounts
    ]
    without_efa = oci_mounts(mounts, exists=lambda path: path not in (EFA_DEVICES, EFA_LIBFABRIC))
    assert [m["destination"] for m in without_efa] == ["/fsx", HPCC_ETC]


@pytest.mark.parametrize("bad", ["fsx", "/fsx/../etc", "/fsx x", "/fsx\nrw", ""])
def test_a_mount_point_that_is_not_a_plain_absolute_path_is_refused(bad):
    with pytest.raises(ValueError, match="fsx.mountPoint"):
        container_mounts(bad)


def test_the_node_renders_the_fstab_with_its_own_mount_point(capsys):
    from hpcc_node.containers import mounts

    assert mounts.main(["/lustre"]) == 0
    assert capsys.readouterr().out == render_enroot_mounts(container_mounts("/lustre"))
    assert mounts.main(["lustre"]) == 2  # refused by name, nothing written
    captured = capsys.readouterr()
    assert captured.out == "" and "fsx.mountPoint" in captured.err

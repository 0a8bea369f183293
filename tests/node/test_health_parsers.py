"""Each health parser on healthy, failing, unknown and malformed outputs of the real tools' documented formats."""

from __future__ import annotations

import json
import os

import pytest

from hpcc_node.health import devices, gpu, host
from tests.render.bootstrap_fixtures import tool
from tests.render.bootstrap_shell import context, run
from tests.render.test_bootstrap_steps import FI_INFO

H100 = "NVIDIA H100 80GB HBM3"


def smi_list(n: int) -> str:
    return "".join(f"GPU {i}: {H100} (UUID: GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd)\n" for i in range(n))


def smi_rows(*rows: str) -> str:
    return "".join(row + "\n" for row in rows)


HEALTHY_ROW = "0, 00000000:53:00.0, 0, No, No"


# -- nvidia-smi -L ----------------------------------------------------------------------------------


def test_gpu_count_passes_with_every_gpu_and_fails_short_naming_both_counts():
    assert gpu.parse_list(smi_list(8), 0, 8).status == "ok"
    short = gpu.parse_list(smi_list(7), 0, 8)
    assert (short.status, short.action, short.remedy) == ("fail", "drain", "replace")
    assert "7 GPU(s) visible, the instance type has 8" in short.evidence


def test_gpu_count_ignores_mig_lines_and_calls_a_strange_line_unknown():
    mig = smi_list(1) + "  MIG 1g.10gb     Device  0: (UUID: MIG-aaaa)\n"
    assert gpu.parse_list(mig, 0, 1).status == "ok"
    assert gpu.parse_list("Failed to initialize NVML: Driver/library version mismatch\n", 0, 8).status == "unknown"


def test_nvidia_smi_failing_is_a_failure_with_its_message():
    result = gpu.parse_list("No devices were found\n", 6, 8)
    assert (result.status, result.remedy) == ("fail", "reboot") and "No devices were found" in result.evidence


# -- nvidia-smi --query-gpu -------------------------------------------------------------------------


def test_the_query_asks_for_the_documented_fields_in_csv_without_header():
    assert gpu.NVIDIA_SMI_QUERY == (
        "nvidia-smi",
        "--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile."
        "total,remapped_rows.pending,remapped_rows.failure",
        "--format=csv,noheader",
    )


def test_gpu_memory_healthy_and_not_reported():
    assert gpu.parse_query(smi_rows(HEALTHY_ROW, "1, 00000000:64:00.0, 0, No, No"), 0).status == "ok"
    blind = gpu.parse_query(smi_rows("0, 00000000:53:00.0, [N/A], [N/A], [Not Supported]"), 0)
    assert blind.status == "warn" and "do not report" in blind.evidence


@pytest.mark.parametrize(
    "row, remedy, words",
    [
        ("1, 00000000:64:00.0, 2, No, No", "reset", "2 uncorrected ECC"),
        ("1, 00000000:64:00.0, 0, Yes, No", "reset", "row remapping pending"),
        ("1, 00000000:64:00.0, 0, No, Yes", "replace", "row remapping failed"),
    ],
)
def test_gpu_memory_faults_drain_with_the_gpu_named(row, remedy, words):
    result = gpu.parse_query(smi_rows(HEALTHY_ROW, row), 0)
    assert (result.status, result.action, result.remedy) == ("fail", "drain", remedy)
    assert words in result.evidence and "GPU 1 (00000000:64:00.0)" in result.evidence


def test_a_driver_without_a_queried_field_is_unknown_not_a_failure_of_every_node():
    result = gpu.parse_query('Field "remapped_rows.pending" is not a valid field to query.\n', 2)
    assert (result.status, result.action) == ("unknown", "none")
    assert (
        gpu.parse_query("Unable to determine the device handle for GPU 0000:53:00.0: GPU is lost.\n", 15).status
        == "fail"
    )


@pytest.mark.parametrize(
    "out",
    ["0, 00000000:53:00.0, 0, No\n", "0, 00000000:53:00.0, lots, No, No\n", "0, 00000000:53:00.0, 0, Maybe, No\n", ""],
)
def test_gpu_memory_malformed_output_is_unknown(out):
    assert gpu.parse_query(out, 0).status == "unknown"


# -- nvidia-smi --query-gpu=...,gpu_recovery_action ------------------------------------------------


@pytest.mark.parametrize(
    "words, action, remedy",
    [("Drain and Reset", "drain", "reset"), ("GPU Reset", "down", "reset"), ("Node Reboot", "down", "reboot")],
)
def test_a_gpu_asking_for_recovery_takes_the_node_out(words, action, remedy):
    result = gpu.parse_recovery(smi_rows("0, 00000000:53:00.0, None", f"1, 00000000:64:00.0, {words}"), 0)
    assert (result.status, result.action, result.remedy) == ("fail", action, remedy)
    assert f"GPU 1 (00000000:64:00.0): recovery action {words}" in result.evidence


@pytest.mark.parametrize(
    "out, rc, status",
    [
        ("0, 00000000:53:00.0, None\n", 0, "ok"),
        ("0, 00000000:53:00.0, [N/A]\n", 0, "warn"),
        ("0, 00000000:53:00.0, Frobnicate\n", 0, "unknown"),
        ("", 0, "unknown"),
        ('Field "gpu_recovery_action" is not a valid field to query.\n', 2, "unknown"),  # an older driver
    ],
)
def test_recovery_action_healthy_unreported_unknown_and_malformed(out, rc, status):
    assert gpu.parse_recovery(out, rc).status == status


# -- dcgmi diag -j ----------------------------------------------------------------------------------


def dcgm4(*tests) -> str:
    """DCGM 4's layout (NvvsJsonStrings.h): per-GPU results and a test summary."""
    return json.dumps(
        {
            "DCGM Diagnostic": {
                "test_categories": [
                    {
                        "category": "Hardware",
                        "tests": [
                            {
                                "name": name,
                                "results": [
                                    {
                                        "entity_group": "GPU",
                                        "entity_id": g,
                                        "status": s,
                                        **({"warnings": [{"message": msg, "error_id": 4}]} if msg else {}),
                                    }
                                    for g, (s, msg) in enumerate(results)
                                ],
                                "test_summary": {"status": "Fail" if any(s == "Fail" for s, _ in results) else "Pass"},
                            }
                            for name, results in tests
                        ],
                    }
                ]
            }
        }
    )


def dcgm3(*tests) -> str:
    """DCGM 3's layout: `DCGM GPU Diagnostic`, one result per test with `gpu_ids`."""
    return json.dumps(
        {
            "DCGM GPU Diagnostic": {
                "test_categories": [
                    {
                        "category": "Deployment",
                        "tests": [
                            {"name": name, "results": [{"gpu_ids": "0,1", "status": status}]} for name, status in tests
                        ],
                    }
                ]
            }
        }
    )


def test_dcgm_passes_and_skips_pass_in_both_layouts():
    assert gpu.parse_dcgm(dcgm4(("memory", [("Pass", ""), ("Skip", "")])), 0).status == "ok"
    assert gpu.parse_dcgm(dcgm3(("Blacklist", "PASS"), ("NVML Library", "Pass")), 0).status == "ok"


def test_dcgm_a_failed_test_fails_the_node_naming_test_gpu_and_message():
    result = gpu.parse_dcgm(dcgm4(("memory", [("Pass", ""), ("Fail", "DBE detected")])), 226)
    assert (result.status, result.action, result.remedy) == ("fail", "drain", "replace")
    assert "memory: GPU 1: DBE detected" in result.evidence
    assert gpu.parse_dcgm(dcgm3(("PCIe", "Fail")), 0).status == "fail"


def test_dcgm_warn_warns_and_an_unknown_status_is_unknown():
    assert gpu.parse_dcgm(dcgm4(("pcie", [("Warn", "")])), 0).status == "warn"
    assert gpu.parse_dcgm(dcgm4(("pcie", [("Degraded", "")])), 0).status == "unknown"


@pytest.mark.parametrize(
    "out, rc, status",
    [
        ("Error: unable to establish a connection to the specified host: localhost\n", 255, "fail"),
        ("not json at all", 0, "unknown"),
        (json.dumps({"something": "else"}), 0, "unknown"),
        (json.dumps({"DCGM Diagnostic": {"test_categories": []}}), 0, "unknown"),
    ],
)
def test_dcgm_malformed_or_failing_tool(out, rc, status):
    assert gpu.parse_dcgm(out, rc).status == status


def test_dcgm_runs_at_the_level_asked():
    assert gpu.dcgmi_argv(3) == ("dcgmi", "diag", "-r", "3", "-j")


# -- fi_info -p efa ---------------------------------------------------------------------------------


def test_efa_devices_counted_once_each_and_a_short_count_fails():
    assert devices.parse_fi_info(FI_INFO + FI_INFO, 0, 4).status == "ok"  # a provider listed twice per device
    short = devices.parse_fi_info(FI_INFO, 0, 32)
    assert (short.status, short.remedy) == ("fail", "replace") and "4 EFA device(s)" in short.evidence
    assert devices.parse_fi_info("fi_getinfo: -61\n", 1, 32).status == "fail"
    assert devices.parse_fi_info("garbage\n", 0, 32).status == "unknown"


def test_the_python_and_the_bootstrap_count_efa_devices_alike(tmp_path):
    """The count is a fact held twice (Python for the agent, bash for the boot): both on the same outputs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for out in (FI_INFO, FI_INFO + FI_INFO, FI_INFO.replace("efa_3-rdm", "efa_2-rdm")):
        tool(bin_dir, "fi_info", f"cat <<'X'\n{out}X\n")
        bash = run(["efa"], "efa_device_count", context(), env=env).stdout.strip()
        assert int(bash) == len(devices.fi_info_domains(out))


# -- neuron-ls --json-output ------------------------------------------------------------------------


def neuron(n: int) -> str:
    return json.dumps(
        [
            {
                "neuron_device": i,
                "bdf": f"{0x10 + i:02x}:1c.0",
                "nc_count": 8,
                "memory_size": 103079215104,
                "connected_to": [],
                "neuron_processes": [],
            }
            for i in range(n)
        ]
    )


def test_neuron_devices_counted_in_both_json_layouts():
    assert devices.parse_neuron_ls(neuron(16), 0, 16).status == "ok"
    wrapped = json.dumps({"instance": {}, "devices": json.loads(neuron(16))})  # Neuron 2.34's object form
    assert devices.parse_neuron_ls(wrapped, 0, 16).status == "ok"
    short = devices.parse_neuron_ls(neuron(15), 0, 16)
    assert (short.status, short.remedy) == ("fail", "replace") and "15 Neuron device(s)" in short.evidence


@pytest.mark.parametrize(
    "out, rc, status",
    [("[]", 0, "fail"), ("{}", 0, "unknown"), ("oops", 0, "unknown"), ("neuron-ls: no driver", 1, "fail")],
)
def test_neuron_ls_empty_malformed_or_failing(out, rc, status):
    assert devices.parse_neuron_ls(out, rc, 16).status == status


# -- EFA error counters -----------------------------------------------------------------------------


def write_counters(root, values: dict) -> None:
    for (dev, port, name), value in values.items():
        d = root / dev / "ports" / port / "hw_counters"
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(f"{value}\n")


def test_efa_counters_read_from_sysfs_and_compared(tmp_path):
    write_counters(
        tmp_path,
        {
            ("rdmap16s27", "1", "rdma_read_wr_err"): 0,
            ("rdmap16s27", "1", "rx_drops"): 5,
            ("rdmap16s27", "1", "tx_bytes"): 99,
        },
    )
    before = devices.read_efa_counters(str(tmp_path))
    assert before == {("rdmap16s27", "1", "rdma_read_wr_err"): 0, ("rdmap16s27", "1", "rx_drops"): 5}
    assert devices.compare_efa(before, before, 1).status == "ok"
    write_counters(tmp_path, {("rdmap16s27", "1", "rdma_read_wr_err"): 50})
    result = devices.compare_efa(before, devices.read_efa_counters(str(tmp_path)), 1)
    assert (result.status, result.action) == ("fail", "drain") and "rdma_read_wr_err +50" in result.evidence


def test_efa_remote_events_and_small_rises_only_warn():
    key = ("rdmap16s27", "1", "unresponsive_remote_events")
    assert devices.compare_efa({key: 0}, {key: 500}, 1).status == "warn"  # a peer's fault as much as ours
    drops = ("rdmap16s27", "1", "rx_drops")
    assert devices.compare_efa({drops: 0}, {drops: 3}, 1).status == "warn"


def test_efa_counters_missing_on_an_efa_node_fail(tmp_path):
    assert devices.compare_efa({}, devices.read_efa_counters(str(tmp_path / "none")), 32).status == "fail"
    assert devices.compare_efa({}, {}, 0).status == "ok"


# -- the shared mount and the disk ------------------------------------------------------------------


def test_mount_probe_writes_reads_back_and_cleans_up(tmp_path):
    result = host.probe_mount(str(tmp_path), "compute-007", is_mount=lambda p: True)
    assert result.status == "ok" and list(tmp_path.iterdir()) == []


def test_mount_probe_fails_when_not_mounted_or_not_writable(tmp_path):
    assert host.probe_mount(str(tmp_path), "n", is_mount=lambda p: False).evidence.endswith("is not mounted")
    not_a_dir = tmp_path / "file"  # a write under it fails for root too, as on a read-only or broken mount
    not_a_dir.write_text("")
    result = host.probe_mount(str(not_a_dir), "n", is_mount=lambda p: True)
    assert (result.status, result.remedy) == ("fail", "reboot") and "not writable" in result.evidence


def test_disk_probe_fails_under_the_minimum(tmp_path):
    assert host.probe_disk(str(tmp_path), 0).status == "ok"
    result = host.probe_disk(str(tmp_path), 10**9)
    assert (result.status, result.action) == ("fail", "drain") and "GiB free" in result.evidence


def test_probe_output_that_is_not_a_result_is_unknown():
    assert host.parse_probe("Traceback (most recent call last):\n  ...\n", 1, "shared_mount").status == "unknown"
    assert host.parse_probe('{"check": "disk_free", "status": "ok"}\n', 0, "shared_mount").status == "unknown"
    assert (
        host.parse_probe('{"check": "shared_mount", "status": "ok", "evidence": "e"}\n', 0, "shared_mount").status
        == "ok"
    )

"""hpcc_node/metrics.py: hpcc's series in Prometheus' text exposition format, read back by the real tools (Debian's
promtool, and node_exporter's textfile collector), and the textfile written whole."""

from __future__ import annotations

import math
import os
import random
import stat

import pytest

from hpcc_contract import metrics
from hpcc_node.metrics import Sample, SeriesError, escape_label_value, format_value, render, write_textfile
from tests.node.metrics_support import named, parse, promtool_check, scrape_textfiles, value

# What a job, a driver or a node may put in a label value: quotes, backslashes (a literal `\n` too), line feeds, a
# whole forged sample line, a closing brace, Unicode.
HOSTILE = [
    'say "hi"',
    "C:\\path\\n",
    "two\nlines",
    '"} 1\nhpcc_bundle_generation{x="',
    "trailing\\",
    "rdmap16s27 \u00e9\u2028",
    "",
]


def every_series() -> list[Sample]:
    """One sample of every series hpcc writes, with a hostile label value."""
    return [Sample(name, {"gpu": HOSTILE[i % len(HOSTILE)]}, i) for i, name in enumerate(sorted(metrics.SERIES))]


def test_every_series_is_written_with_its_help_and_type_and_promtool_reads_it_clean():
    text = render(every_series())
    for name, (kind, help_text) in metrics.SERIES.items():
        assert f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n{name}" in text, name
    out = promtool_check(text)
    assert (out.returncode, out.stdout + out.stderr) == (0, ""), out.stdout + out.stderr


def test_hostile_label_values_are_escaped_so_promtool_parses_them_and_they_read_back_as_data():
    samples = [Sample("hpcc_efa_errors_total", {"device": v, "counter": "rx_drops"}, i) for i, v in enumerate(HOSTILE)]
    text = render(samples)
    assert len(text.rstrip("\n").split("\n")) == 2 + len(HOSTILE)  # a line feed in a value never starts a line
    out = promtool_check(text)
    assert (out.returncode, out.stdout + out.stderr) == (0, ""), out.stdout + out.stderr
    read = named(parse(text), "hpcc_efa_errors_total")
    assert {dict(labels)["device"]: v for labels, v in read.items()} == {v: i for i, v in enumerate(HOSTILE)}


def test_hostile_label_values_round_trip_through_node_exporters_textfile_collector(tmp_path):
    """The collector parses the file with Prometheus' own parser and serves the samples again: each value comes back
    the same, and no forged series appears."""
    samples = [Sample("hpcc_efa_bytes_total", {"device": v, "direction": "rx"}, i) for i, v in enumerate(HOSTILE)]
    write_textfile(str(tmp_path), metrics.TEXTFILE_HEALTH, render(samples))
    served = parse(scrape_textfiles(str(tmp_path)))
    assert value(served, "node_textfile_scrape_error") == 0
    back = named(served, "hpcc_efa_bytes_total")
    assert {dict(labels)["device"]: v for labels, v in back.items()} == {v: i for i, v in enumerate(HOSTILE)}
    assert not named(served, "hpcc_bundle_generation")  # the forged line stayed inside its label value


@pytest.mark.parametrize(
    "raw, escaped",
    [('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb"), ("\\n", "\\\\n"), ("plain", "plain")],
)
def test_the_three_escapes_of_a_label_value(raw, escaped):
    assert escape_label_value(raw) == escaped


def test_only_hpccs_series_with_valid_label_names_once_each_are_written():
    with pytest.raises(SeriesError, match="not one of hpcc's series"):
        render([Sample("node_cpu_seconds_total", {}, 1)])
    with pytest.raises(SeriesError, match="not a Prometheus label name"):
        render([Sample("hpcc_gpu_row_remap_failed", {"gpu-index": "0"}, 1)])
    with pytest.raises(SeriesError, match="not a Prometheus label name"):
        render([Sample("hpcc_gpu_row_remap_failed", {"__name__": "x"}, 1)])
    with pytest.raises(SeriesError, match="given twice"):
        render(
            [Sample("hpcc_gpu_row_remap_failed", {"gpu": "0"}, 1), Sample("hpcc_gpu_row_remap_failed", {"gpu": "0"}, 0)]
        )
    assert render([]) == ""


def test_the_same_samples_in_any_order_give_the_same_bytes_names_and_labels_sorted():
    samples = every_series() + [Sample("hpcc_gpu_row_remap_pending", {"gpu": str(g)}, 0) for g in range(8)]
    shuffled = samples[:]
    random.Random(7).shuffle(shuffled)
    text = render(samples)
    assert render(shuffled) == text
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert names == sorted(names) and len(names) == len(set(names))
    gpus = [line for line in text.splitlines() if line.startswith("hpcc_gpu_row_remap_pending{")]
    assert gpus == sorted(gpus) and len(gpus) == 9


@pytest.mark.parametrize(
    "v, text",
    [(3, "3"), (3.0, "3"), (-2, "-2"), (0.25, "0.25"), (1e300, "1e+300"), (math.inf, "+Inf"), (math.nan, "NaN")],
)
def test_values_as_prometheus_reads_them(v, text):
    assert format_value(v) == text


def test_the_textfile_is_written_whole_beside_itself_then_renamed_readable_by_all(tmp_path, monkeypatch):
    steps: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (steps.append(("fsync", "")), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (steps.append(("replace", str(a))), real_replace(a, b))[1])
    old = os.umask(0o077)  # a daemon's strict umask: the collector (its own user) must still read the file
    try:
        path = write_textfile(str(tmp_path / "metrics"), metrics.TEXTFILE_AGENT, "hpcc_bundle_generation 1\n")
    finally:
        os.umask(old)
    assert [s for s, _ in steps] == ["fsync", "replace"]
    tmp = steps[1][1]
    assert os.path.dirname(tmp) == str(tmp_path / "metrics") and not tmp.endswith(".prom")  # never read half-written
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644 and os.listdir(tmp_path / "metrics") == [metrics.TEXTFILE_AGENT]


def test_a_failed_write_leaves_the_last_file_and_no_temporary(tmp_path, monkeypatch):
    write_textfile(str(tmp_path), metrics.TEXTFILE_AGENT, "hpcc_bundle_generation 1\n")

    def full(a, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        write_textfile(str(tmp_path), metrics.TEXTFILE_AGENT, "hpcc_bundle_generation 2\n")
    assert os.listdir(tmp_path) == [metrics.TEXTFILE_AGENT]
    assert (tmp_path / metrics.TEXTFILE_AGENT).read_text() == "hpcc_bundle_generation 1\n"
    with pytest.raises(ValueError, match=r"\*\.prom"):
        write_textfile(str(tmp_path), "hpcc.txt", "")


def test_node_exporter_runs_with_the_contracts_flags_its_collectors_alone_and_no_per_cpu_series(tmp_path):
    """The flags the bootstrap starts node_exporter with (hpcc_contract/metrics.py NODE_EXPORTER_FLAGS): the real
    node_exporter takes them, runs the collectors named and no other, serves no per-CPU series (the trap on a p5's
    192 vCPUs), and reads hpcc's files from the textfile directory."""
    assert f"--collector.textfile.directory={metrics.TEXTFILE_DIR}" in metrics.NODE_EXPORTER_FLAGS
    write_textfile(str(tmp_path), metrics.TEXTFILE_AGENT, render([Sample("hpcc_membership_generation", {}, 4)]))
    served = parse(scrape_textfiles(str(tmp_path), metrics.NODE_EXPORTER_FLAGS))
    ran = {dict(labels)["collector"] for labels in named(served, "node_scrape_collector_success")}
    assert ran == set(metrics.NODE_EXPORTER_COLLECTORS)
    assert not [name for name, labels in served if "cpu" in dict(labels)]
    assert not [name for name, _ in served if name.startswith(("go_", "process_"))]
    assert value(served, "hpcc_membership_generation") == 4 and value(served, "node_textfile_scrape_error") == 0


def test_a_process_writes_its_series_where_named_else_where_the_metrics_step_made_the_directory(tmp_path, monkeypatch):
    from hpcc_node.metrics import textfile_dir

    assert textfile_dir({"HPCC_METRICS_DIR": str(tmp_path)}) == str(tmp_path)
    monkeypatch.setattr(metrics, "TEXTFILE_DIR", str(tmp_path / "absent"))
    assert textfile_dir({}) == ""  # metrics off here (or a test's machine): nothing is written
    (tmp_path / "absent").mkdir()
    assert textfile_dir({}) == str(tmp_path / "absent")

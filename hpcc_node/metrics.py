"""hpcc's own series in Prometheus' text exposition format, written where node_exporter's textfile collector reads
them. Standard library only: the node side has no Prometheus client library and opens no port of its own.

The format ("Text-based format", https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format):
one `# HELP` and one `# TYPE` line per metric name, then its samples `name{label="value",...} value`, every sample
of a name together. A label value escapes backslash, double quote and line feed (`\\\\`, `\\"`, `\\n`); HELP text
escapes backslash and line feed. Label values here come from what jobs and nodes write (a device name, a PCI bus id,
a check's name), so the escaping is what keeps them data and never syntax. Only the series of
hpcc_contract/metrics.py SERIES are written, each with its type and help, in a fixed order (names sorted, then
label sets sorted): the same samples always give the same bytes.

The file (node_exporter's README, "Textfile Collector", https://github.com/prometheus/node_exporter#textfile-collector):
the collector reads every `*.prom` file of its directory at each scrape, and a file must be written whole, "to a
temporary file in the same directory and then renamed", so a scrape never reads half of one.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Dict, Iterable, List, Mapping, NamedTuple, Tuple

from hpcc_contract import metrics

FILE_MODE = 0o644  # node_exporter runs as its own user: it must read what root writes
DIR_MODE = 0o755


class Sample(NamedTuple):
    name: str  # one of metrics.SERIES
    labels: Mapping[str, str]
    value: float


class SeriesError(ValueError):
    """A sample the format or hpcc's contract refuses (unknown name, bad label name, the same series twice)."""


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A float as Go's ParseFloat reads it: whole numbers without a fraction, NaN and +Inf/-Inf spelled out."""
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(v)


def _label_text(labels: Mapping[str, str]) -> str:
    for key in labels:
        if not metrics.valid_label_name(key):
            raise SeriesError(f"label name {key!r} is not a Prometheus label name")
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(str(labels[k]))}"' for k in sorted(labels)) + "}"


def render(samples: Iterable[Sample]) -> str:
    """The exposition text of `samples`: names sorted, each name's samples sorted by their labels."""
    by_name: Dict[str, Dict[Tuple[Tuple[str, str], ...], float]] = {}
    for s in samples:
        if s.name not in metrics.SERIES:
            raise SeriesError(f"{s.name!r} is not one of hpcc's series (hpcc_contract/metrics.py SERIES)")
        key = tuple(sorted((k, str(v)) for k, v in s.labels.items()))
        series = by_name.setdefault(s.name, {})
        if key in series:
            raise SeriesError(f"{s.name}{_label_text(dict(key))} given twice")
        series[key] = s.value
    lines: List[str] = []
    for name in sorted(by_name):
        kind, text = metrics.SERIES[name]
        lines += [f"# HELP {name} {escape_help(text)}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{_label_text(dict(k))} {format_value(v)}" for k, v in sorted(by_name[name].items())]
    return "\n".join(lines) + "\n" if lines else ""


def textfile_dir(env: Mapping[str, str]) -> str:
    """Where a process (the agent, its health thread, the controller) writes its series: HPCC_METRICS_DIR, else
    node_exporter's textfile directory where it exists (the bootstrap's metrics step makes it before it starts
    them, where observability is on), else "": no series, so metrics off (or a test's machine) writes nothing."""
    named = env.get("HPCC_METRICS_DIR")
    if named:
        return named
    return metrics.TEXTFILE_DIR if os.path.isdir(metrics.TEXTFILE_DIR) else ""


def write_textfile(directory: str, filename: str, text: str) -> str:
    """`text` as `directory/filename`, whole: a temporary file beside it (not *.prom, so the collector skips it),
    fsync'd, mode 0644, renamed over the old one. Returns the path."""
    if os.sep in filename or not filename.endswith(".prom"):
        raise ValueError(f"{filename!r}: the textfile collector reads *.prom files of its directory only")
    os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
    path = os.path.join(directory, filename)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{filename}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), FILE_MODE)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path

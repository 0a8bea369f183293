"""What the series tests share: Debian's Prometheus tools (promtool, from the `prometheus` package; the real
node_exporter, `prometheus-node-exporter`), found or skipped (with CI=true, a missing one fails), and a reader of the
exposition text that undoes the format's three escapes, to read a file back as data."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

PACKAGES = {
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "prometheus-node-exporter": "prometheus-node-exporter",
}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Series = dict[tuple[str, frozenset], float]


def tool(name: str) -> str:
    """The tool's path; skipped where it is missing, a failure with CI=true (Makefile APT_PACKAGES installs it)."""
    path = shutil.which(name)
    if path is None:
        why = f"{name} is missing (Debian package {PACKAGES[name]}: sudo make deps)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the series tests cannot run in CI: {why}", pytrace=False)
        pytest.skip(why)
    return path


def promtool_check(text: str) -> subprocess.CompletedProcess:
    """`promtool check metrics` over the text (stdin): exit 0 and nothing said when it parses and lints clean."""
    return subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )


def unescape(value: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], value)


def parse(text: str) -> Series:
    """(name, labels) -> value of every sample line; a line that is not one fails the test."""
    out: Series = {}
    for line in text.split("\n"):  # the format's one line break (str.splitlines() also breaks at U+2028)
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        body, labels = m.group(2) or "", {}
        while body:
            lm = _LABEL.match(body)
            assert lm, f"not a label in {line!r}: {body!r}"
            labels[lm.group(1)] = unescape(lm.group(2))
            body = body[lm.end() :]
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


def value(series: Series, name: str, **labels: str) -> float:
    return series[(name, frozenset(labels.items()))]


def named(series: Series, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in series.items() if n == name}


TEXTFILES_ONLY = ("--web.disable-exporter-metrics", "--collector.disable-defaults", "--collector.textfile")


def scrape_textfiles(directory: str, flags: tuple[str, ...] = TEXTFILES_ONLY) -> str:
    """The real node_exporter's /metrics (by default with only its textfile collector), reading `directory`, on a
    free loopback port (stopped before returning)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            tool("prometheus-node-exporter"),
            f"--web.listen-address=127.0.0.1:{port}",
            *(f for f in flags if not f.startswith("--collector.textfile.directory=")),
            f"--collector.textfile.directory={directory}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "node_exporter gave no /metrics"
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

"""The head's agent keeps the head's Prometheus on the metrics files of the bundle it runs (issue 34, day 2): its
configuration, alert rules and command line, and its Grafana's configuration and dashboards, come in the bundle's
metrics/ (infra/render/bundle.py metrics_files), so a changed scrape interval, retention, rule, remote write or
dashboard reaches the running head with the bundle, no replacement.
When the bundle it runs brings other metrics files than it last applied, it runs the role script's `apply-metrics`
(templates/steps/metrics.sh.j2: the metrics step again, which restarts Prometheus only if what it reads changed) and
records what it applied. A failed apply is logged with its output and tried again after RETRY_S, not every tick."""

from __future__ import annotations

import hashlib
import os
from typing import Optional, Tuple

METRICS_DIR = "metrics"  # in the bundle
APPLIED = "metrics.applied"  # under the agent's etc: the digest of the metrics files last applied
RETRY_S = 300.0


def metrics_digest(bundle_dir: str) -> str:
    """The sha256 over the bundle's metrics files (Prometheus', Grafana's, the dashboards), their paths and bytes;
    '' when it has none (observability is off)."""
    where = os.path.join(bundle_dir, METRICS_DIR)
    if not os.path.isdir(where):
        return ""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(where):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                data = f.read()
            h.update(f"{os.path.relpath(path, where)}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()


class MetricsFollowing:
    """Agent's metrics method. What it uses of the agent: its config `c`, `run`, `clock`, `log`, `running`,
    `current_dir()`, `run_role()`."""

    metrics_retry_at: Optional[float] = None
    metrics_digest_of: Tuple[str, str] = ("", "")  # (bundle sha, its metrics digest): a bundle never changes

    def follow_metrics(self) -> None:
        if self.c.role != "head":
            return
        if self.metrics_digest_of[0] != self.running:
            self.metrics_digest_of = (self.running, metrics_digest(self.current_dir()))
        digest = self.metrics_digest_of[1]
        applied_path = self.c.path(APPLIED)
        try:
            with open(applied_path) as f:
                applied = f.read().strip()
        except OSError:
            applied = ""
        if not digest or digest == applied:
            return
        now = self.clock()
        if self.metrics_retry_at is not None and now < self.metrics_retry_at:
            return
        rc, said = self.run_role("apply-metrics")
        if rc != 0:
            self.metrics_retry_at = now + RETRY_S
            self.log(
                f"apply-metrics of bundle {self.running[:12]} failed (exit {rc}): {said or 'no output'}; "
                f"again in {RETRY_S:.0f} s"
            )
            return
        self.metrics_retry_at = None
        tmp = applied_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(digest + "\n")
        os.replace(tmp, applied_path)
        self.log(f"the head's Prometheus runs bundle {self.running[:12]}'s metrics files (apply-metrics)")

"""`hpcc dashboard`: the head's Grafana (infra/render/grafana.py) through a Session Manager port forward to
127.0.0.1:3000 on the head (Grafana listens nowhere else), held open until Ctrl-C. It says where the admin password
is and how to read it (a root-only file on the head), never the password itself."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from infra.facts import grafana as facts
from infra.ops import OpsError, forward
from infra.render.grafana import ADMIN_USER, PASSWORD_PATH

WHAT = "the head's Grafana"


def port_taken(port: int) -> bool:
    """Is localhost:`port` already bound here (the forward could not listen there)?"""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def head_grafana(aws, cluster: str, region: str, local_port: int | None = None) -> forward.Forward:
    """The port forward to `cluster`'s head's Grafana, ready to enter."""
    return forward.head_forward(aws, cluster, region, facts.PORT, WHAT, on_head_ip=False, local_port=local_port)


def how_to_log_in(url: str, ssh_command: str) -> str:
    """What the operator reads: the URL, the user, and how to read the password on the head."""
    return (
        f"Grafana: {url} (the hpcc dashboards are in its hpcc folder)\n"
        f"user {ADMIN_USER}; the password is on the head, readable by root only: {ssh_command}, then "
        f"`sudo cat {PASSWORD_PATH}`\n"
        "Ctrl-C closes the forward."
    )


def hold(fwd: forward.Forward, sleep: Callable[[float], None] = time.sleep) -> None:
    """Until Ctrl-C (KeyboardInterrupt, left to the caller); a forward that ends by itself is an error."""
    while fwd.alive():
        sleep(1.0)
    raise OpsError(f"the port forward to {WHAT} ended")

"""The node agent's part that keeps the node on the cluster's membership (hpcc_node/agent.py's Agent inherits it):
each tick's poll of membership.json (hpcc_node/controller/membership.py poll: a HeadObject, on a change its deltas or
the whole object), whether to apply what it read, and the role script's `apply-membership` with the hosts text
hpcc_node/hosts.py renders (the one writer of the membership files). A newer generation is applied; a lower one only
when the object changed and its bytes are the controller's (the sha256 in its metadata): the controller's count was
reset (its ledger lost with the object), and without this the node would refuse every generation until the count
passed its own again. Only the head's controller writes the object, so this opens nothing a newer generation did not."""

from __future__ import annotations

import tempfile
from typing import Any, Dict, Optional

from hpcc_contract.names import MEMBERSHIP_KEY
from hpcc_contract.settings import NewerSettings, SettingsError
from hpcc_node import hosts, state
from hpcc_node.aws import AwsError
from hpcc_node.controller import membership
from hpcc_node.settings import parse


def membership_due(
    applied_generation: int,
    applied_settings: str,
    doc: Optional[Dict[str, Any]],
    read_settings: str,
    intact: bool = False,
) -> bool:
    """Apply a newer membership generation (membership.newer), a lower one whose bytes are the controller's
    (`intact`: a reset of its count, membership.went_back), or the same one when the settings text changed."""
    if doc is None:
        return False
    back = intact and membership.went_back(applied_generation, doc)
    return (
        membership.newer(applied_generation, doc) or back or read_settings.rstrip("\n") != applied_settings.rstrip("\n")
    )


class MembershipFollowing:
    """Agent's membership methods. What they use of the agent: its config `c`, `s3`, `run`, `log`, `node`,
    `running`, `refuse_newer()`, `current_dir()`, `run_role()` and the membership fields set in Agent.__init__
    (`doc`, `etag`, `intact`, `refused`, `newer`, `settings`)."""

    def read_membership(self) -> None:
        try:
            got = membership.poll(self.s3, self.c.state_bucket, self.doc, self.etag)
        except Exception as e:  # noqa: BLE001 - S3 unreachable: the applied membership stays
            raise AwsError(f"s3://{self.c.state_bucket}/{MEMBERSHIP_KEY}: {e}") from None
        self.etag = got.etag
        if got.doc is not None:  # a changed object (its ETag): a lower generation is said once, here
            self.doc, self.intact = got.doc, got.intact
            if membership.went_back(self.node.hosts_version, got.doc):
                self.log(membership.reset_line(self.node.hosts_version, got.doc, got.intact))

    def apply_doc(self, doc: Any, settings_text: str) -> None:
        try:
            version, text = hosts.generation(doc), hosts.hosts_text(doc)
        except hosts.NewerMembership as e:
            self.refuse_newer("membership", str(e))
            return
        except hosts.MembershipError as e:
            self.log(f"{e}: refused, the applied membership stays")
            return
        self.newer.pop("membership", None)
        if not hosts.lists(doc, self.node.node, self.node.instance_id):
            if version != self.refused:  # once a generation: a node out of service reads it every tick
                self.refused = version
                self.log(
                    f"membership generation {version} "
                    f"{hosts.unlisted_why(doc, self.node.node, self.node.instance_id)}: not applied"
                )
            return
        self.apply_membership(version, text, settings_text)

    def apply_membership(self, version: int, hosts_text: str, settings_text: str) -> None:
        try:
            settings = parse(settings_text)
        except NewerSettings as e:
            self.refuse_newer("settings", f"{self.c.settings_parameter}: {e}")
            return
        except SettingsError as e:
            self.log(f"{e}: {self.c.settings_parameter} refused, the applied settings stay")
            return
        self.newer.pop("settings", None)
        try:
            pairs = state.parse_hosts(hosts_text, self.c.vpc_cidr)
        except state.StateError as e:
            self.log(f"{e}: membership generation {version} refused, the applied membership stays")
            return
        at = hosts.line_holds(pairs, self.node.node, self.node.ip)
        if at is not None:
            self.log(
                f"membership generation {version} lists {at} as {self.node.node}, not this node's {self.node.ip}: not "
                "applied"
            )
            return
        # The hosts text goes through a file: at 4,096 nodes it nears Linux's 128 KiB limit on one environment string
        # (MAX_ARG_STRLEN, execve(2) "Limits on size of arguments and environment").
        with tempfile.NamedTemporaryFile("w", dir=self.c.etc, prefix=".apply-hosts.", delete=True) as hosts_file:
            hosts_file.write(hosts_text)
            hosts_file.flush()
            rc, _ = self.run_role(
                "apply-membership",
                HPCC_APPLY_VERSION=str(version),
                HPCC_APPLY_HOSTS_FILE=hosts_file.name,
                HPCC_APPLY_SETTINGS=settings_text,
            )
        if rc != 0:
            self.log(f"apply-membership of membership generation {version} failed (exit {rc}); next tick")
            return
        self.node = state.parse_state(state.read_text(self.c.path("node")) or "")
        self.settings = settings
        # the message stays: the generation applied goes in the status object's metadata (agent_status.py), so an
        # apply does not change the body the controller reads again whenever its ETag changes

"""IAM statements a node role may carry for a feature that is on (iam_rules.py accepts them beside the cluster's own
reach): the head's Prometheus remote write (observability), the compute role's image service (containers)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from hpcc_contract import names

if __package__:  # imported as the package `policy` (the tests)
    from . import records
else:  # loaded by the Pulumi engine as a script directory (__main__.py puts it on sys.path)
    import records  # type: ignore[no-redef]


# The head's Prometheus writes to the Amazon Managed Service for Prometheus workspace observability.remoteWrite names:
# aps:RemoteWrite on named workspaces, for the head's role alone. A workspace id is at most 64 of [-.0-9A-Z_a-z]
# (API Reference, WorkspaceDescription), so never a pattern: no * or ?.
_WORKSPACE = re.compile(r"arn:aws[a-z-]*:aps:[a-z0-9-]+:\d{12}:workspace/ws-[0-9A-Za-z][-.0-9A-Z_a-z]{0,60}")


def remote_write_statement(statement: Mapping, role: str, cluster: str) -> bool:
    actions = {str(a) for a in records.as_list(statement.get("Action"))}
    targets = [str(t) for t in records.as_list(statement.get("Resource"))]
    return (
        actions == {"aps:RemoteWrite"}
        and "NotResource" not in statement
        and bool(targets)
        and all(_WORKSPACE.fullmatch(t) for t in targets)
        and role.rsplit("/", 1)[-1] == names.role_name(cluster, "head")
    )


# A compute node's image service (issue 35; infra/program/components/feature_access.py containers_statements), for
# the compute role alone: ECR's token (GetAuthorizationToken takes no resource: "*"), pulls from the account's
# repositories in a Region, and reading ONE secret named by its name or ARN (containers.ngcSecret; a name ends with
# Secrets Manager's six-character suffix, "-??????"), never a pattern over several.
ECR_TOKEN = frozenset({"ecr:GetAuthorizationToken"})
ECR_PULL = frozenset({"ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"})
_ECR_REPOSITORIES = re.compile(r"arn:aws[a-z-]*:ecr:[a-z0-9-]+:\d{12}:repository/\*")
_ONE_SECRET = re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+(?:-\?{6})?")


def containers_statement(statement: Mapping, role: str, cluster: str) -> bool:
    actions = {str(a) for a in records.as_list(statement.get("Action"))}
    targets = [str(t) for t in records.as_list(statement.get("Resource"))]
    if role.rsplit("/", 1)[-1] != names.role_name(cluster, "compute") or "NotResource" in statement or not actions:
        return False
    if actions <= ECR_TOKEN:
        return targets == ["*"]
    if actions <= ECR_PULL:
        return bool(targets) and all(_ECR_REPOSITORIES.fullmatch(t) for t in targets)
    return (
        actions == {"secretsmanager:GetSecretValue"} and len(targets) == 1 and bool(_ONE_SECRET.fullmatch(targets[0]))
    )

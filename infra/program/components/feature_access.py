"""What a node role may reach for a feature that is on, part of the node policy (identity.py node_policy): the head's
Prometheus remote write (observability), a compute node's ECR pulls and NGC secret (containers, issue 35: for the
node's image service, hpcc_node/containers/credentials.py)."""

from __future__ import annotations

# Pulling an image from ECR (ECR User Guide, "Private repository policies" / the AmazonEC2ContainerRegistryReadOnly
# managed policy's pull actions): the token (GetAuthorizationToken takes no resource) and the layers of the account's
# repositories in the cluster's Region.
ECR_PULL = ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]


def containers_statements(region: str, account: str, ecr: bool, ngc_secret: str | None) -> list[dict]:
    """A compute node's image service (issue 35; hpcc_node/containers/credentials.py): ECR's token and pulls from
    the account's repositories in the Region when containers.ecr is on; reading containers.ngcSecret, that secret
    alone (a name matches its ARN with the 6 characters Secrets Manager adds: "-??????", Secrets Manager User Guide,
    "Resource: secret ARN with a wildcard"), when one is named."""
    out: list[dict] = []
    if ecr:
        out += [
            {"Sid": "EcrToken", "Effect": "Allow", "Action": ["ecr:GetAuthorizationToken"], "Resource": "*"},
            {
                "Sid": "EcrPull",
                "Effect": "Allow",
                "Action": ECR_PULL,
                "Resource": [f"arn:aws:ecr:{region}:{account}:repository/*"],
            },
        ]
    if ngc_secret:
        arn = (
            ngc_secret
            if ngc_secret.startswith("arn:")
            else f"arn:aws:secretsmanager:{region}:{account}:secret:{ngc_secret}-??????"
        )
        out.append({"Sid": "NgcKey", "Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": [arn]})
    return out


def remote_write_statements(workspace_arn: str | None) -> list[dict]:
    """The head's Prometheus writes to observability.remoteWrite's workspace, no other (RemoteWrite takes a workspace:
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonmanagedserviceforprometheus.html)."""
    grant = {"Sid": "MetricsRemoteWrite", "Effect": "Allow", "Action": ["aps:RemoteWrite"], "Resource": [workspace_arn]}
    return [grant] if workspace_arn else []

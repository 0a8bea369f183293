"""Root's registry credentials for enroot (issue 35): the lines of enroot's `.credentials` (netrc, doc/cmd/import.md,
https://github.com/NVIDIA/enroot) in hpcc_contract.containers.ROOT_ENROOT_CONFIG, which only the node's image service
points its enroot children at. Written on a compute node by root alone (hpcc_node/containers/credentials.py: the
account's ECR token, refreshed by the agent; the NGC key the containers step fetched), every part checked here, so
the program's render (infra/render/containers.py) and the node agree on one format. Standard library only.

enroot evaluates a password that starts with `$` with a shell (common::evalnetrc), so no password here may hold one:
ECR's token is written as it is and refreshed before it expires, never as `$(aws ecr get-login-password ...)`. NGC
needs both its machines ("both endpoints are required")."""

from __future__ import annotations

import re
from typing import Optional, Tuple

CREDENTIALS_NAME = ".credentials"  # in ROOT_ENROOT_CONFIG, mode CREDENTIALS_MODE
CREDENTIALS_MODE = 0o600
NGC_KEY_NAME = "ngc.key"  # in ROOT_ENROOT_CONFIG, mode 0600: the NGC key as the containers step fetched it
NGC_MACHINES = ("nvcr.io", "authn.nvidia.com")
NGC_LOGIN = "$oauthtoken"  # literal: only the password field is evaluated
ECR_LOGIN = "AWS"
ECR_TOKEN_HOURS = 12  # "The authorization token is valid for 12 hours" (aws ecr get-login-password)
ECR_REFRESH_HOURS = 6  # root refreshes it at half its life
_HOST = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+")
_PASSWORD = re.compile(r"[A-Za-z0-9+/=._-]{1,8192}")  # base64 (ECR's token) and NGC's keys; no `$`, no space
_REGION = re.compile(r"[a-z]{2}(-[a-z]{1,10}){1,2}-[1-9]")


class BadCredential(ValueError):
    """A credentials part hpcc does not write; the message never holds a password."""


def ecr_registry(account: str, region: str) -> str:
    """The account's private registry (ECR User Guide, "Private registry concepts")."""
    if not re.fullmatch(r"[0-9]{12}", account) or not _REGION.fullmatch(region):
        raise BadCredential(f"ECR registry: account {account[:20]!r} or region {region[:20]!r} is malformed")
    return f"{account}.dkr.ecr.{region}.amazonaws.com"


def netrc_line(machine: str, login: str, password: str) -> str:
    """One `.credentials` line, every part checked: written by root, read by root's enroot."""
    if not _HOST.fullmatch(machine):
        raise BadCredential(f"credentials: machine {machine[:64]!r} is not a host name")
    if login not in (ECR_LOGIN, NGC_LOGIN):
        raise BadCredential(f"credentials: login {login[:20]!r} is not one hpcc writes")
    if not _PASSWORD.fullmatch(password):
        raise BadCredential("credentials: the password is not a token hpcc writes (its value is not shown)")
    return f"machine {machine} login {login} password {password}\n"


def credentials_text(ecr: Optional[Tuple[str, str]], ngc_key: Optional[str]) -> str:
    """The whole file: `ecr` (registry, token) when the account's ECR is on, NGC's two machines when a key is given."""
    lines = [netrc_line(ecr[0], ECR_LOGIN, ecr[1])] if ecr else []
    if ngc_key is not None:
        lines += [netrc_line(machine, NGC_LOGIN, ngc_key) for machine in NGC_MACHINES]
    return "".join(lines)

"""Root's registry credentials on a compute node (issue 35): enroot's `.credentials` in ROOT_ENROOT_CONFIG (0700,
root's), which only the image service's enroot children read (service.py root_enroot). Its lines are the contract's
(hpcc_contract/enroot_credentials.py): the account's ECR token, which the agent gets from the node's role
(`aws ecr get-login-password`: the token on the CLI's stdout, never in an argument or the log) and writes again every
ECR_REFRESH_HOURS, half the token's 12 h life; and the NGC key the containers step fetched into NGC_KEY_NAME at boot.
Written whole (a temporary file in the same directory, mode 0600, renamed), so enroot never reads half a file.

Which registries: the bundle's containers/registries (infra/render/containers.py bundle_files): `ecr` when
containers.ecr is on, `ngc <secret>` when containers.ngcSecret names one."""

from __future__ import annotations

import os
import subprocess
from typing import Callable, NamedTuple, Optional, Tuple

from hpcc_contract import enroot_credentials as ec
from hpcc_contract.containers import ROOT_ENROOT_CONFIG
from hpcc_node.containers.service import check_private
from hpcc_node.sshkeys import replace_file

REGISTRIES = "registries"  # in the bundle's containers/
RETRY_S = 300.0
TOKEN_TIMEOUT_S = 60


class Registries(NamedTuple):
    ecr: bool
    ngc: bool


def parse_registries(text: str) -> Registries:
    """The bundle's containers/registries: `ecr` and `ngc <secret>` lines; anything else is ignored."""
    words = [line.split()[0] for line in text.splitlines() if line.split()]
    return Registries("ecr" in words, "ngc" in words)


def ecr_token(region: str, run: Callable = subprocess.run) -> str:
    """The account's ECR token from the node's role, as `aws ecr get-login-password` prints it."""
    done = run(
        ["aws", "ecr", "get-login-password", "--region", region],
        capture_output=True,
        text=True,
        timeout=TOKEN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        said = " ".join((done.stderr or "").split())[-300:]
        raise OSError(f"aws ecr get-login-password: exit {done.returncode}: {said or 'no output'}")
    return done.stdout.strip()


def read_ngc_key(directory: str = ROOT_ENROOT_CONFIG) -> Optional[str]:
    try:
        with open(os.path.join(directory, ec.NGC_KEY_NAME)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def write_credentials(text: str, directory: str = ROOT_ENROOT_CONFIG) -> None:
    """`text` as the directory's `.credentials`, mode 0600, whole; the directory must be this uid's 0700 one."""
    check_private(directory)
    replace_file(os.path.join(directory, ec.CREDENTIALS_NAME), text, ec.CREDENTIALS_MODE)


class CredentialsKeeper:
    """Keeps `.credentials` current: written when missing, when the NGC key file is newer, and every
    ECR_REFRESH_HOURS while ECR is on. A failure is logged (never the token) and tried again after RETRY_S."""

    def __init__(
        self,
        registries: Registries,
        region: str,
        account: str,
        log: Callable[[str], None],
        token: Callable[[str], str],
        clock: Callable[[], float],
        directory: str = ROOT_ENROOT_CONFIG,
    ) -> None:
        self.registries, self.region, self.account = registries, region, account
        self.log, self.token, self.clock, self.directory = log, token, clock, directory
        self.written_at: Optional[float] = None
        self.retry_at: Optional[float] = None

    def path(self) -> str:
        return os.path.join(self.directory, ec.CREDENTIALS_NAME)

    def due(self, now: float) -> Optional[str]:
        if self.retry_at is not None and now < self.retry_at:
            return None
        try:
            written = os.stat(self.path()).st_mtime
        except FileNotFoundError:
            return "no credentials file yet"
        try:
            if os.stat(os.path.join(self.directory, ec.NGC_KEY_NAME)).st_mtime > written:
                return "a new NGC key"
        except FileNotFoundError:
            pass
        if self.registries.ecr and (self.written_at is None or now - self.written_at >= ec.ECR_REFRESH_HOURS * 3600):
            return "the ECR token is due"
        return None

    def tick(self) -> None:
        now = self.clock()
        why = self.due(now)
        if why is None:
            return
        try:
            ecr: Optional[Tuple[str, str]] = None
            if self.registries.ecr:
                ecr = (ec.ecr_registry(self.account, self.region), self.token(self.region))
            ngc = read_ngc_key(self.directory) if self.registries.ngc else None
            write_credentials(ec.credentials_text(ecr, ngc), self.directory)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            self.retry_at = now + RETRY_S
            self.log(f"registry credentials not written ({why}): {e}; again in {RETRY_S:.0f} s")
            return
        self.written_at, self.retry_at = now, None
        said = ", ".join(n for n, on in (("ECR", ecr is not None), ("NGC", ngc is not None)) if on) or "none"
        self.log(f"registry credentials written ({why}): {said}")

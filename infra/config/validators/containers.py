"""The `containers:` section's values and rules (infra/config/containers.py is its model): the NGC secret's name or
ARN, the shared image cache's default cap, and the rules over them (`RULES`, run with the other config rules by
check.py)."""

from __future__ import annotations

import re
from typing import NamedTuple

from pydantic.alias_generators import to_camel

from infra.config.validators.findings import ERROR, NOT_SHOWN, WARNING, Finding
from infra.facts import containers as facts

CONTAINERS = "cluster.containers"
# The shared image cache (hpcc_contract/containers.py, on the cluster's FSx) may take a quarter of the file system by
# default: images are 5-30 GiB each, so 1,200 GiB (the smallest FSx) keeps about ten to sixty, and three quarters stay
# for datasets and checkpoints. More than half is a warning, more than the file system an error.
CACHE_SHARE = (1, 4)
CACHE_WARN_SHARE = (1, 2)

# --- the NGC secret -------------------------------------------------------------------------------------------------
# A Secrets Manager secret's name: "ASCII letters, numbers, and the following characters: /_+=.@-", at most 512
# (CreateSecret's Name: https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html). An ARN:
# arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters Secrets Manager adds> (same page, and "Secret
# ARN" in the User Guide); the aws partition, the cluster roles' own.
SECRET_NAME = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")
SECRET_ARN = re.compile(
    r"arn:aws:secretsmanager:(?P<region>[a-z]{2}(-[a-z]{1,10}){1,2}-[1-9]):(?P<account>[0-9]{12}):secret:"
    r"(?P<name>[A-Za-z0-9/_+=.@-]{1,512})"
)
SECRET_FORM = "a Secrets Manager secret's name (e.g. ngc-api-key) or its ARN (arn:aws:secretsmanager:...:secret:...)"
# What NGC's keys look like, so that a key pasted where its secret's name goes is refused, not stored in the stack
# file and the plan: NGC's personal API keys start `nvapi-` (UNVERIFIED against NVIDIA's documentation here); legacy
# keys are a long run of letters and digits, which no secret name a person chooses is.
KEY_LIKE = re.compile(r"nvapi-.*|[A-Za-z0-9]{40,}")


class SecretRef(NamedTuple):
    name: str  # the name, or the ARN's name part (with Secrets Manager's suffix)
    arn: str | None
    region: str | None


def secret_ref(text: str) -> SecretRef | None:
    m = SECRET_ARN.fullmatch(text)
    if m:
        return SecretRef(m["name"], text, m["region"])
    return SecretRef(text, None, None) if SECRET_NAME.fullmatch(text) and not text.startswith("arn:") else None


def secret_problem(text: str) -> str | None:
    """Why `text` names no secret (the caller shows it), or None. Never repeats the value: it may be a key."""
    problem = _secret_problem(text)
    return f"{problem} {NOT_SHOWN}" if problem else None


def _secret_problem(text: str) -> str | None:
    if KEY_LIKE.fullmatch(text):
        return (
            "looks like an NGC API key itself, not a secret's name: never put the key in the stack file; store it "
            "in Secrets Manager (aws secretsmanager create-secret --name ngc-api-key --secret-string ...) and give "
            "that secret's name here"
        )
    if secret_ref(text) is not None:
        return None
    if text.startswith("arn:"):
        return f"is not a Secrets Manager secret's ARN in the aws partition; give {SECRET_FORM}"
    return f"is not {SECRET_FORM}: at most 512 of letters, digits and /_+=.@-"


# --- enroot's release digests -----------------------------------------------------------------------------------
def digests_problem(digests: dict[str, str]) -> str | None:
    """Why the stack's releaseDigests cannot be used (the caller names the field), or None: each name one of the
    pinned enroot release's .debs, each value GitHub's "sha256:<64 lowercase hex>"."""
    known = facts.enroot_asset_names()
    for name, digest in digests.items():
        if name not in known:
            return (
                f"{name[:80]!r} is not a file of enroot {facts.ENROOT_VERSION}, the release hpcc installs; "
                f"the known ones are {', '.join(known)} (`hpcc pin containers` prints them)"
            )
        if not isinstance(digest, str) or not facts.DIGEST.fullmatch(digest):
            return (
                f"{name}: {str(digest)[:80]!r} is not a digest as GitHub's release API gives it, "
                "sha256:<64 lowercase hex digits> (`hpcc pin containers` prints them)"
            )
    return None


# --- the cache's cap ------------------------------------------------------------------------------------------------
def default_cache_gib(fsx_capacity_gib: int) -> int:
    return max(1, fsx_capacity_gib * CACHE_SHARE[0] // CACHE_SHARE[1])


# --- the rules ------------------------------------------------------------------------------------------------------
def containers_need_slurm(cfg):
    """pyxis is a Slurm SPANK plugin: `srun --container-image` is the whole interface, so containers without Slurm
    would install enroot for nobody. A section that only says `enabled: false` is fine anywhere."""
    c = cfg.cluster
    given = c.containers.model_fields_set
    if c.scheduler == "slurm" or not given or c.containers.enabled is False:
        return
    field = f"{CONTAINERS}.enabled" if c.containers.enabled else CONTAINERS
    yield Finding(
        ERROR,
        field,
        "enroot and pyxis run containers through Slurm (srun --container-image), and this cluster has no Slurm "
        "(scheduler: none): set scheduler: slurm, or remove the containers section (or set containers.enabled: false)",
    )


def containers_cache_fits(cfg):
    c = cfg.cluster
    cap, capacity = c.containers.cache_max_gib, c.fsx.storage_capacity
    if cap is None or not c.containers_on:
        return
    field = f"{CONTAINERS}.cacheMaxGiB"
    if cap > capacity:
        yield Finding(
            ERROR,
            field,
            f"{cap} GiB is more than the file system holds (fsx.storageCapacityGiB: {capacity}): the cache would fill "
            "Lustre and every job writing to it would fail; give at most half of it "
            f"({capacity * CACHE_WARN_SHARE[0] // CACHE_WARN_SHARE[1]}), raise fsx.storageCapacityGiB, or leave it out "
            f"({default_cache_gib(capacity)} GiB here)",
        )
    elif cap * CACHE_WARN_SHARE[1] > capacity * CACHE_WARN_SHARE[0]:
        yield Finding(
            WARNING,
            field,
            f"{cap} GiB is more than half the file system (fsx.storageCapacityGiB: {capacity}): images can crowd "
            f"out datasets and checkpoints; the default is {default_cache_gib(capacity)} GiB",
        )


def containers_secret_region(cfg):
    """A secret in another Region can be read by its ARN (the node calls that Region's endpoint), so this warns."""
    c = cfg.cluster
    ref = secret_ref(c.containers.ngc_secret) if c.containers.ngc_secret else None
    if ref is not None and ref.region is not None and ref.region != cfg.region:
        yield Finding(
            WARNING,
            f"{CONTAINERS}.ngcSecret",
            f"the secret is in {ref.region}, the cluster in aws:region {cfg.region}: every node reads it across "
            f"Regions, and that Region's trouble stops NGC pulls; keep a copy in {cfg.region}",
        )


def containers_settings_unused(cfg):
    c = cfg.cluster
    fields = type(c.containers).model_fields
    given = sorted(fields[f].alias or to_camel(f) for f in c.containers.model_fields_set - {"enabled"})
    if c.containers_on or not given or c.scheduler != "slurm":
        return  # without Slurm containers_need_slurm says it
    yield Finding(
        WARNING,
        CONTAINERS,
        f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect with containers.enabled: false (no "
        "node gets enroot or pyxis, and the nodes' role gets no ECR or NGC access); remove them or enable containers",
    )


def containers_restrict_dev(cfg):
    """enroot's ENROOT_RESTRICT_DEV replaces the container's /dev with a minimal set (conf/hooks/10-devices.sh), so
    EFA's /dev/infiniband is not there and NCCL falls back to TCP sockets. GPUs are unaffected (98-nvidia.sh adds
    them through nvidia-container-cli)."""
    c = cfg.cluster
    if not (c.containers_on and c.containers.enroot.restrict_dev):
        return
    if any(g.efa is not False for g in c.node_groups):
        yield Finding(
            WARNING,
            f"{CONTAINERS}.enroot.restrictDev",
            "hides EFA's devices (/dev/infiniband) from containers on groups with EFA (every group that does not set "
            "efa: false), so multi-node NCCL runs over TCP; leave it false unless those groups use no EFA in "
            "containers",
        )


RULES = [
    containers_need_slurm,
    containers_cache_fits,
    containers_secret_region,
    containers_settings_unused,
    containers_restrict_dev,
]

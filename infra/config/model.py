"""The stack config: one structured key `hpcc:cluster`, as a typed model.

Shape and types are pydantic's job (unknown keys are errors); rules that relate several fields live in
`infra/config/validators/`, one small function each, so every message is found in one place; `parse`
(infra/config/parse.py) validates the model, then runs them. The rules read the model and the facts below it
(infra/facts/), never this module's names for them.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from hpcc_contract.settings import BOOT_DIAG_LEVEL_DEFAULT, BOOT_DIAG_LEVEL_MAX, MOUNT_POINT_MAX, account_problem
from hpcc_contract.settings import SCHEDULERS as NODE_SCHEDULERS
from infra.config.containers import Containers
from infra.config.nodes import ComputeNodes, ConfigModel, HeadNode, NodeGroup, group_of
from infra.config.observability import Observability
from infra.config.validators.containers import default_cache_gib
from infra.config.validators.inputs import PUBLIC_KEYS_BYTES, public_key_problem, s3_path_problems, tag_key_problem
from infra.facts.images import IMAGE_FAMILIES
from infra.facts.limits import MAX_GROUPS

CLUSTER_NAME = re.compile(r"[a-z][a-z0-9-]{1,30}[a-z0-9]")  # fullmatch: `$` would let a trailing newline in
# Tag value characters every tagged service accepts (IAM, FSx and Secrets Manager refuse the rest; EC2 takes
# anything). Keys are narrower still: infra.config.validators.inputs.TAG_KEY.
TAG_PUNCTUATION = "_.:/=+-@"


def _tag_text_ok(text: str) -> bool:
    return all(ch in TAG_PUNCTUATION or unicodedata.category(ch)[0] in "LNZ" for ch in text)


# The job scheduler the nodes run: none (launch with mpirun/torchrun over the hostfile) or slurm (infra/facts/slurm.py).
Scheduler = Literal["none", "slurm"]
SCHEDULERS: tuple[str, ...] = get_args(Scheduler)
assert SCHEDULERS == NODE_SCHEDULERS  # the nodes' copy (hpcc_contract/settings.py)


_Model = ConfigModel  # the base of every config model (unknown keys are errors)


class Image(_Model):
    family: str | None = None
    ami_id: str | None = Field(None, pattern=r"^ami-[0-9a-f]{8,17}$")
    name_filter: str | None = Field(None, min_length=3, max_length=128)
    login_user: str | None = Field(None, pattern=r"^[a-z_][a-z0-9_-]{0,31}$")

    @field_validator("login_user")
    @classmethod
    def _not_root(cls, v: str | None) -> str | None:
        if v == "root":
            raise ValueError(
                "root is refused: people log in as the image's user (ubuntu, ec2-user) with their own keys "
                "(cluster.ssh.authorizedKeys); root logins are only the cluster's own, inside the VPC"
            )
        problem = v and account_problem(v)  # the nodes refuse it too (LOGIN_USER)
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _one_source(self) -> Image:
        given = [k for k in ("family", "ami_id", "name_filter") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"give one of family, amiId or nameFilter, not {' and '.join(to_camel(g) for g in given)}")
        if self.family is not None and self.family not in IMAGE_FAMILIES:
            raise ValueError(f"family must be one of {', '.join(sorted(IMAGE_FAMILIES))}; got {self.family!r}")
        return self

    @property
    def resolved_family(self) -> str | None:
        if self.ami_id or self.name_filter:
            return None
        return self.family or "base-oss-nvidia-driver-gpu-ubuntu-22.04"

    @property
    def ssm_parameter(self) -> str | None:
        return self.ssm_parameter_for("x86_64")

    def ssm_parameter_for(self, arch: str) -> str | None:
        """The family's public parameter for the nodes' architecture (x86_64 or arm64)."""
        fam = self.resolved_family
        return f"/aws/service/deeplearning/ami/{arch}/{fam}/latest/ami-id" if fam else None

    @property
    def user(self) -> str:
        if self.login_user:
            return self.login_user
        fam = self.resolved_family
        return IMAGE_FAMILIES[fam][0] if fam else "ubuntu"

    @property
    def amazon_linux(self) -> bool:
        """Does the config say the image is Amazon Linux (its family, a name filter naming it, or its login user
        ec2-user)? An amiId alone says nothing: the bootstrap's os step finds out on the node."""
        fam, words = self.resolved_family or "", (self.name_filter or "").lower()
        return "amazon-linux" in fam or "amazon linux" in words or "al2023" in words or self.user == "ec2-user"


class Fsx(_Model):
    deployment_type: Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"] = "SCRATCH_2"
    storage_capacity_gi_b: int = Field(1200, alias="storageCapacityGiB", ge=1)
    storage_type: Literal["SSD", "HDD"] = "SSD"
    per_unit_storage_throughput: int | None = None
    lustre_version: Literal["2.10", "2.12", "2.15"] = "2.15"
    mount_point: str = Field("/fsx", pattern=r"^[A-Za-z0-9._/-]+$", max_length=MOUNT_POINT_MAX)
    data_repository_path: str | None = None
    export_deletions: bool = Field(False, description="export deletions under the S3 link to the bucket")

    @field_validator("data_repository_path")
    @classmethod
    def _s3_path(cls, v: str | None) -> str | None:
        problems = s3_path_problems(v) if v is not None else []
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @property
    def storage_capacity(self) -> int:
        return self.storage_capacity_gi_b


class Ssh(_Model):
    allowed_cidrs: list[str] = Field(default_factory=list, max_length=50)
    # The users' own public keys, for the login user on every node (the cluster's key works only inside the VPC).
    authorized_keys: list[str] = Field(default_factory=list, max_length=10)

    @field_validator("authorized_keys")
    @classmethod
    def _keys(cls, v: list[str]) -> list[str]:
        for i, key in enumerate(v):
            problem = public_key_problem(key)
            if problem:
                raise ValueError(f"[{i}] {problem}")
        if sum(len(k) + 1 for k in v) > PUBLIC_KEYS_BYTES:
            raise ValueError(
                f"the keys take {sum(len(k) + 1 for k in v)} bytes; at most {PUBLIC_KEYS_BYTES} fit the "
                "settings parameter the nodes read: give fewer keys, or ed25519 keys (about 100 bytes each)"
            )
        return v

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        for i, cidr in enumerate(v):
            try:
                address = ipaddress.ip_address(cidr)
            except ValueError:
                pass
            else:  # EC2 wants the prefix length, and a bare address is most likely meant as one host
                raise ValueError(
                    f"[{i}] {cidr!r} has no prefix length; write {address}/{address.max_prefixlen} for that one address"
                )
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError as e:
                raise ValueError(f"[{i}] {cidr!r} is not a network in CIDR form like 203.0.113.0/24 ({e})") from None
        return v


class Bootstrap(_Model):
    timeout_minutes: int = Field(60, ge=5, le=240)
    join_timeout_minutes: int = Field(20, ge=1, le=120)


LINUX_USER = r"^[a-z_][a-z0-9_-]{0,31}$"


class Security(_Model):
    """Who besides root may reach the instance metadata service, and so the node's role: that role reads the
    cluster's SSH key, root on every node (docs/security.md, "Instance metadata: root only"). Both default off."""

    # Users whose processes may reach IMDS (an owner-match firewall rule lets them through): they can read the key.
    imds_for_users: list[str] = Field(default_factory=list, max_length=10)
    # Hop limit 2 instead of 1: bridge-networked containers get IMDSv2 tokens too (a container running as root
    # passes the owner rule: uid 0 inside is uid 0 outside unless user namespaces remap it).
    imds_for_containers: bool = False

    @field_validator("imds_for_users")
    @classmethod
    def _users(cls, v: list[str]) -> list[str]:
        for i, user in enumerate(v):
            if not re.fullmatch(LINUX_USER, user):
                raise ValueError(
                    f"[{i}] {user!r} is not a Linux user name (lower-case letters, digits, '_' and '-', "
                    "at most 32, not starting with a digit or '-')"
                )
            if user == "root":
                raise ValueError(f"[{i}] root always reaches the instance metadata service; list only other users")
            if account_problem(user):  # the nodes refuse it too (IMDS_USER)
                raise ValueError(
                    f"[{i}] {account_problem(user)}: it would read the node role's secrets, the cluster key among them"
                )
            if user in v[:i]:
                raise ValueError(f"[{i}] {user!r} is listed twice")
        return v


class Hooks(_Model):
    """The user's own scripts (paths relative to the stack file's directory), run as root at that point of every
    node's bootstrap from the cluster's bundle, each bounded by `timeoutMinutes` (infra/config/hooks.py checks the
    files)."""

    on_node_start: list[str] = Field(default_factory=list, max_length=10)
    on_node_ready: list[str] = Field(default_factory=list, max_length=10)
    timeout_minutes: int = Field(10, ge=1, le=120)


class Health(_Model):
    """The health checks (hpcc_node/health/). `bootDiagLevel`: the DCGM diagnostic level run before a node is
    ready (`dcgmi diag -r N`; 1 takes seconds, 2 a few minutes, 3 and 4 up to hours), 0 for none. Only at boot and
    after a remedy's reboot, never per job: it takes the GPUs."""

    boot_diag_level: int = Field(BOOT_DIAG_LEVEL_DEFAULT, ge=0, le=BOOT_DIAG_LEVEL_MAX)


class ClusterConfig(_Model):
    name: str
    availability_zone: str | None = Field(None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")
    head_node: HeadNode = HeadNode()
    # `compute:` (one group named compute, as every cluster before node groups) or `nodeGroups:`, not both.
    compute: ComputeNodes | None = None
    given_groups: list[NodeGroup] | None = Field(None, alias="nodeGroups", min_length=1, max_length=MAX_GROUPS)
    image: Image = Image()
    fsx: Fsx = Fsx()
    ssh: Ssh = Ssh()
    bootstrap: Bootstrap = Bootstrap()
    security: Security = Security()
    # Default none: a cluster made before this field gets no Slurm and no new secret, and Amazon Linux has no
    # Slurm package.
    scheduler: Scheduler = "none"
    hooks: Hooks = Hooks()
    health: Health = Health()
    observability: Observability = Observability()  # Prometheus and the exporters (infra/config/observability.py)
    containers: Containers = Containers()  # enroot, pyxis and the shared image cache (infra/config/containers.py)
    tags: dict[str, str] = Field(default_factory=dict, max_length=40)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not CLUSTER_NAME.fullmatch(v):
            raise ValueError(
                "must be 3-32 characters of lower-case letters, digits and '-', start with a letter and "
                f"not end with '-' (it names AWS resources and parameter paths); got {v!r}"
            )
        return v

    @model_validator(mode="after")
    def _groups(self) -> ClusterConfig:
        if self.compute is not None and self.given_groups is not None:
            raise ValueError(
                "give either compute (one group named compute) or nodeGroups, not both: move compute's "
                "fields into nodeGroups as `- name: compute`"
            )
        if self.compute is None and self.given_groups is None:
            raise ValueError(
                "nodeGroups is required: a list of groups, each with a name, instanceType and count "
                "(or compute: for one group; see examples/)"
            )
        return self

    @property
    def node_groups(self) -> list[NodeGroup]:
        """Every node group, `compute:` as the group named compute."""
        return [group_of(self.compute)] if self.compute is not None else list(self.given_groups or [])

    @property
    def groups_field(self) -> str:
        """The config path the groups were given under."""
        return "cluster.compute" if self.compute is not None else "cluster.nodeGroups"

    @property
    def count_field(self) -> str:
        """Where the node count is set: `compute.count`, or the groups' counts together."""
        return "cluster.compute.count" if self.compute is not None else "cluster.nodeGroups"

    def group_field(self, index: int, key: str | None = None) -> str:
        """The config path of a group (or one of its keys), as the user wrote it: cluster.nodeGroups[1].count, or
        cluster.compute.count for `compute:`."""
        base = "cluster.compute" if self.compute is not None else f"cluster.nodeGroups[{index}]"
        return f"{base}.{key}" if key else base

    @property
    def node_count(self) -> int:
        return sum(g.count for g in self.node_groups)

    @property
    def metrics_on(self) -> bool:
        """observability.enabled as given, else on with Slurm."""
        return self.observability.on(self.scheduler)

    @property
    def metrics_workspace_arn(self) -> str | None:
        """The workspace the head's Prometheus writes to: remoteWrite's, while metrics are on."""
        remote = self.observability.remote_write
        return remote.workspace_arn if remote is not None and self.metrics_on else None

    @property
    def containers_on(self) -> bool:
        """containers.enabled as given, else on with Slurm."""
        return self.containers.on(self.scheduler)

    @property
    def image_cache_gib(self) -> int:
        """The shared image cache's cap: cacheMaxGiB as given, else a quarter of the file system."""
        given = self.containers.cache_max_gib
        return given if given is not None else default_cache_gib(self.fsx.storage_capacity)

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not 1 <= len(key) <= 128 or key.lower().startswith(("aws:", "hpcc:")):
                raise ValueError(f"key {key!r}: keys are 1-128 characters and may not start with 'aws:' or 'hpcc:'")
            if problem := tag_key_problem(key):
                raise ValueError(problem)
            if len(value) > 256:
                raise ValueError(f"value of {key!r} is {len(value)} characters; AWS allows 256")
            if not _tag_text_ok(value):
                raise ValueError(
                    f"{key!r}: {value!r}: tag values may hold only letters, digits, spaces and "
                    f"{' '.join(TAG_PUNCTUATION)} (IAM, FSx and Secrets Manager refuse other characters)"
                )
        return v


class StackConfig(_Model):
    """Everything the program reads from the stack: the region and the cluster."""

    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    cluster: ClusterConfig

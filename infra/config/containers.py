"""The stack file's `containers:` section (issue 35): enroot and pyxis on every node of a Slurm cluster, so that
`srun --container-image`, `--container-mounts` and `--container-name` work everywhere, and the shared image cache on
the cluster's file system (hpcc_contract/containers.py, hpcc_node/containers/).

- `enabled`: default on with `scheduler: slurm`, off otherwise. pyxis is a Slurm SPANK plugin, so a containers
  section on a cluster without Slurm is refused (validators/containers.py); `false` turns it off everywhere. Every
  hpcc cluster has its FSx file system (`cluster.fsx` cannot be left out), which holds the shared cache.
- `cacheMaxGiB` (default a quarter of fsx.storageCapacityGiB): the most the shared image cache keeps on Lustre, its
  least recently used images evicted first; more than the file system is refused, more than half a warning.
- `ecr` (default true): the nodes' role may pull from the cluster account's ECR in its Region, and enroot gets a
  token for it, refreshed by root from the role (the users' own processes never reach instance metadata:
  `security.imdsForUsers`).
- `ngcSecret`: the name or ARN of a Secrets Manager secret holding an NGC API key (never the key itself); the nodes'
  role may read that secret alone, and enroot gets it for nvcr.io.
- `enroot.*`: enroot's limits and behaviour on each node (enroot's doc/configuration.md and conf/enroot.conf.in,
  https://github.com/NVIDIA/enroot): the import's parallelism, connections, timeouts and retries, the squashfs
  compression of per-node imports, and the container defaults users can still change per job.
- `pyxis.*`: pyxis' plugstack options (its config.c): a named container's scope, the image's entrypoint, sbatch.
- `releaseDigests`: enroot's release .debs (by file name) -> the sha256 digest GitHub's release API reports for each,
  "sha256:<hex>", as `hpcc pin containers` prints them; each node checks its downloads against them (infra/facts/
  containers.py says why the user pins them).

Read by the bundle (infra/render/containers.py bundle_files: enroot's and pyxis' files, which registries), the
bootstrap's containers step (templates/steps/containers.sh.j2), the nodes' IAM (infra/program/components/
feature_access.py) and preflight (refused while a .deb the cluster downloads has no digest: infra/facts/
containers.py require_pinned)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from infra.config.nodes import ConfigModel
from infra.config.validators.containers import digests_problem, secret_problem


class Enroot(ConfigModel):
    # ENROOT_MAX_PROCESSORS: None is enroot's default, every CPU ($(nproc)); an import's mksquashfs and unpacking use
    # them while a job's other steps may be running on the node.
    max_processors: int | None = Field(None, ge=1, le=1024)
    max_connections: int = Field(10, ge=1, le=64)  # ENROOT_MAX_CONNECTIONS, enroot's default 10: parallel layer GETs
    connect_timeout_seconds: int = Field(30, ge=1, le=600)  # ENROOT_CONNECT_TIMEOUT, enroot's default
    transfer_timeout_seconds: int = Field(0, ge=0, le=86_400)  # ENROOT_TRANSFER_TIMEOUT, 0: unbounded (enroot's)
    # ENROOT_TRANSFER_RETRIES: enroot's default is 0; hpcc retries 3 times, because a thousand nodes importing at once
    # through one NAT meet a reset connection or a registry's 5xx.
    transfer_retries: int = Field(3, ge=0, le=20)
    # ENROOT_SQUASH_OPTIONS of a node's own imports, which pyxis unpacks and deletes at once: none (the pyxis wiki's
    # Setup page, `-noI -noD -noF -noX -no-duplicates`, fastest), lzo (enroot's default) or zstd (pyxis' caching
    # importer's, for images kept).
    squash_compression: Literal["none", "lzo", "zstd"] = "none"
    rootfs_writable: bool = True  # ENROOT_ROOTFS_WRITABLE: the pyxis wiki, ParallelCluster and HyperPod all set yes
    remap_root: bool = False  # ENROOT_REMAP_ROOT (pyxis' own remap_root option went in 0.12: enroot's decides)
    mount_home: bool = False  # ENROOT_MOUNT_HOME: --container-mount-home asks for it per job
    # ENROOT_RESTRICT_DEV: a minimal /dev hides EFA's /dev/infiniband (conf/hooks/10-devices.sh); ParallelCluster and
    # HyperPod leave it off.
    restrict_dev: bool = False
    allow_http: bool = False  # ENROOT_ALLOW_HTTP: plain-HTTP registries ("UNSECURE!", enroot.conf.in)


class Pyxis(ConfigModel):
    # container_scope: `job` removes a job's named containers when it ends (pyxis_slurmd.c's job epilog), so local
    # NVMe does not fill with them; `global` (pyxis' default) keeps them on the node across jobs.
    container_scope: Literal["job", "global"] = "job"
    execute_entrypoint: bool = False  # pyxis' default: the image's ENTRYPOINT is not run before the command
    sbatch_support: bool = True  # pyxis' default: `#SBATCH --container-image` runs the batch script in it


class Containers(ConfigModel):
    enabled: bool | None = None  # None: on with Slurm (ClusterConfig.containers_on)
    cache_max_gib: int | None = Field(None, alias="cacheMaxGiB", ge=1)  # None: a quarter of the FSx capacity
    ecr: bool = True
    ngc_secret: str | None = None
    enroot: Enroot = Enroot()
    pyxis: Pyxis = Pyxis()
    release_digests: dict[str, str] = {}  # enroot asset name -> "sha256:<hex>" (`hpcc pin containers`)

    @field_validator("release_digests")
    @classmethod
    def _digests(cls, v: dict[str, str]) -> dict[str, str]:
        problem = digests_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("ngc_secret")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        problem = secret_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v

    def on(self, scheduler: str) -> bool:
        return self.enabled if self.enabled is not None else scheduler == "slurm"

"""FSx for Lustre in the nodes' subnet, an optional S3 data repository association, and the
`/hpcc/<cluster>/fsx` parameter the nodes wait for, so instances never wait on the file system."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from hpcc_contract.names import Paths, tags
from infra.config.model import Fsx


@dataclass
class StorageArgs:
    cluster: str
    fsx: Fsx
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    security_rules: list[pulumi.Resource]  # the Lustre port rules: AWS refuses the file system without them
    extra_tags: dict[str, str] = field(default_factory=dict)


def export_events(fsx: Fsx) -> list[str]:
    """What FSx writes back to S3 by itself. DELETED would delete the bucket's objects whenever a file under /s3 is
    deleted on the cluster, so it is opt-in (`fsx.exportDeletions`). The events are the S3 AutoExportPolicy's
    (FSx API reference, AutoExportPolicy); changing them updates the association in place
    (UpdateDataRepositoryAssociation)."""
    return ["NEW", "CHANGED", "DELETED"] if fsx.export_deletions else ["NEW", "CHANGED"]


class Storage(pulumi.ComponentResource):
    file_system_id: pulumi.Output[str]
    dns_name: pulumi.Output[str]
    mount_name: pulumi.Output[str]

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hpcc:cluster:Storage", name, None, opts)
        c, t, fsx = args.cluster, args.extra_tags, args.fsx
        fs = aws.fsx.LustreFileSystem(
            f"{c}-fsx",
            deployment_type=fsx.deployment_type,
            storage_capacity=fsx.storage_capacity,
            storage_type=fsx.storage_type,
            per_unit_storage_throughput=fsx.per_unit_storage_throughput,
            file_system_type_version=fsx.lustre_version,
            subnet_ids=args.subnet_id,
            security_group_ids=[args.security_group_id],
            tags=tags(c, "fsx", t),
            # Replacing the file system loses its data: Pulumi refuses to while it is protected. README,
            # "Changing a running cluster", says how to really change it; `hpcc destroy` lifts it first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.security_rules, protect=True),
        )
        if fsx.data_repository_path:
            aws.fsx.DataRepositoryAssociation(
                f"{c}-fsx-s3",
                file_system_id=fs.id,
                file_system_path="/s3",
                data_repository_path=fsx.data_repository_path,
                batch_import_meta_data_on_create=True,
                s3={
                    "auto_import_policy": {"events": ["NEW", "CHANGED", "DELETED"]},
                    "auto_export_policy": {"events": export_events(fsx)},
                },
                tags=tags(c, "fsx-s3", t),
                opts=pulumi.ResourceOptions(parent=self),
            )
        aws.ssm.Parameter(
            f"{c}-fsx-param",
            name=Paths(c).fsx,
            type="String",
            tags=tags(c, "fsx-param", t),
            description="FSx for Lustre endpoint; the nodes' bootstrap waits for it",
            value=pulumi.Output.all(fs.dns_name, fs.mount_name).apply(
                lambda a: json.dumps({"dnsName": a[0], "mountName": a[1]}, sort_keys=True)
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.file_system_id = fs.id
        self.dns_name = fs.dns_name
        self.mount_name = fs.mount_name
        self.register_outputs({"fileSystemId": fs.id, "dnsName": fs.dns_name, "mountName": fs.mount_name})

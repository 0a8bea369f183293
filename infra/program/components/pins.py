"""What is resolved once, at the stack's first `pulumi up`, and then kept: the image and the availability zone.

Without this, a DLAMI family is looked up again at every run, so the first `up` after AWS publishes an image
would replace every node whatever it was run for; and an unset AZ is re-derived from the node types, so a
compute-type change could move the subnet and with it the file system.

Each pin is an SSM parameter under the cluster's prefix. Its value is what the program resolved; Pulumi keeps
the first value (`ignore_changes`) until the user says to move it:
- the image: a change of the image's source in the config (family, nameFilter: `replace_on_changes` on the
  description, which names the source), or `hpcc up --update-image` (a forced replace of the pin). A pinned
  `amiId` is taken as it is, so the pin follows the config.
- the AZ: `cluster.availabilityZone` when set (the pin follows it); when unset, the AZ kept since the first up.
  A node type that AZ does not offer is an error naming both (lookups.check_kept_az); an AZ of another region
  means the stack's region changed, an error that says so (infra/facts/az.py moved_region_problem).
Pulumi docs, resource options `ignoreChanges`, `replaceOnChanges`, `deleteBeforeReplace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from hpcc_contract.names import Paths, image_pin, tags
from infra.config.model import ClusterConfig
from infra.program import lookups
from infra.program.lookups import ImageInfo


@dataclass
class PinsArgs:
    config: ClusterConfig
    extra_tags: dict[str, str] = field(default_factory=dict)
    architecture: str = "x86_64"  # the node types' (infra/config/validators/type_rules.cluster_architecture)
    region: str | None = None  # the stack's: a kept AZ from another region means the region changed


class Pins(pulumi.ComponentResource):
    image: pulumi.Output[ImageInfo]
    availability_zone: pulumi.Output[str]

    def __init__(self, name: str, args: PinsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hpcc:cluster:Pins", name, None, opts)
        cfg, t = args.config, args.extra_tags
        c, paths = cfg.name, Paths(cfg.name)

        resolved = lookups.image(cfg, args.architecture)
        source = lookups.image_source(cfg, args.architecture)
        follows_config = bool(cfg.image.ami_id)
        image_param = aws.ssm.Parameter(
            image_pin(c),
            name=paths.pinned_image,
            type="String",
            insecure_value=resolved.apply(ImageInfo.to_json),
            description=f"hpcc {c}: the nodes' image, from {source}; kept until that changes or `hpcc up "
            "--update-image`",
            tags=tags(c, "image-pin", t),
            # Same name on replacement: the old parameter must go first.
            opts=pulumi.ResourceOptions(
                parent=self,
                delete_before_replace=True,
                replace_on_changes=["description"],
                ignore_changes=[] if follows_config else ["insecureValue"],
            ),
        )
        self.image = image_param.insecure_value.apply(ImageInfo.from_json)

        offered = lookups.offered_azs(cfg)
        configured = cfg.availability_zone
        first = (
            pulumi.Output.from_input(configured)
            if configured
            else offered.apply(lambda o: lookups.first_az(o, lookups.node_types(cfg)))
        )
        az_pin = aws.ssm.Parameter(
            f"{c}-az-pin",
            name=paths.pinned_az,
            type="String",
            insecure_value=first,
            description=f"hpcc {c}: the cluster's availability zone, kept from the first `pulumi up` unless "
            "cluster.availabilityZone is set",
            tags=tags(c, "az-pin", t),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=[] if configured else ["insecureValue"]),
        )
        self.availability_zone = pulumi.Output.all(az_pin.insecure_value, offered).apply(
            lambda a: lookups.check_kept_az(a[0], a[1], cfg, args.region)
        )
        self.register_outputs({"image": image_param.insecure_value, "availabilityZone": self.availability_zone})

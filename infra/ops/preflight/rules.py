"""`hpcc preflight`: checks against the region, before anything is created.

One small rule per check, each yielding `infra.config.validators.Finding`s (severity, config field, what to do),
like the config rules. Rules share a `Context` (infra/ops/preflight/context.py) that asks AWS each question once.
Every rule reads the head and each node group (Context.roles, Context.groups), never one `compute:` block. Nothing
is created: the only write-shaped call is RunInstances with DryRun=True."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from botocore.exceptions import BotoCoreError, ClientError
from rich.markup import escape

from infra.config.model import StackConfig
from infra.config.validators.check import check_config
from infra.config.validators.findings import ERROR, INFO, WARNING, Finding
from infra.config.validators.placeholders import placeholder_errors
from infra.config.validators.type_rules import TYPE_RULES, efa_off, resolve_types
from infra.facts import containers as containers_facts
from infra.facts import prices
from infra.facts.az import kept_az_problem
from infra.facts.instance_types import DescribedFacts
from infra.ops.aws import Aws, error_code
from infra.ops.preflight.capacity import capacity_reservation
from infra.ops.preflight.context import (
    AZ_FIELD,
    IMAGE_FIELD,
    Context,
    Role,
    offered_list,
    utc_now,
)
from infra.ops.preflight.groups import launch_rate
from infra.ops.preflight.launch import dry_run_launch, vcpu_quota
from infra.ops.preflight.neighbours import shared_ssm_throughput

# Instance families the current Base OSS Nvidia-driver DLAMIs list as supported (release notes).
BASE_OSS_SUPPORTED = ("g4dn", "g5", "g6", "g6e", "gr6", "g6f", "g7e", "p4d", "p4de", "p5", "p5e", "p5en", "p6")


def _one_per_type(roles: list[Role]) -> list[Role]:
    """The first role of each instance type (groups of one type need one price and one image check)."""
    first: dict[str, Role] = {}
    for r in roles:
        first.setdefault(r.instance_type, r)
    return list(first.values())


# -- rules ---------------------------------------------------------------------------------------------


def config_findings(ctx: Context) -> Iterable[Finding]:
    """The config rules' warnings (errors already stopped the config from loading)."""
    for f in check_config(ctx.cfg):
        # The live image rules below supersede the config's guess about the image.
        if not f.is_error and not (f.field == IMAGE_FIELD and ctx.image is not None):
            yield f


# Preflight's own live rules cover EFA and placement (efa_support, placement_strategy) and unknown types (types_exist).
LIVE_TYPE_RULES = [r for r in TYPE_RULES if r.__name__ not in ("efa_matches_type", "cluster_placement")]


def type_facts(ctx: Context) -> Iterable[Finding]:
    """The program's type rules (markets, architecture, head interfaces) on this region's answers."""
    types, _ = resolve_types(ctx.cfg, DescribedFacts(ctx.type_info, ctx.aws.region))
    for rule in LIVE_TYPE_RULES:
        yield from rule(ctx.cfg, types)


def price_list(ctx: Context) -> Iterable[Finding]:
    """Each node type's on-demand price from the AWS Price List API, else the dated snapshot, else "price unknown"."""
    for role in _one_per_type(ctx.roles):
        try:
            usd, source = (
                prices.price_list_price(ctx.pricing_client(), role.instance_type, ctx.aws.region),
                "Price List API",
            )
        except (ClientError, BotoCoreError, NotImplementedError) as e:
            usd, source = (
                None,
                f"Price List API not read: {error_code(e) if isinstance(e, ClientError) else type(e).__name__}",
            )
        if usd is None and ctx.aws.region == prices.SNAPSHOT_REGION:
            usd, source = prices.snapshot_price(role.instance_type), f"{source}; snapshot of {prices.SNAPSHOT_DATE}"
        shown = f"${usd:,.4f}/hour on-demand" if usd is not None else "price unknown"
        yield Finding(INFO, role.field, f"{role.instance_type}: {shown} ({source})")


def types_exist(ctx: Context) -> Iterable[Finding]:
    for role in ctx.roles:
        if role.instance_type not in ctx.type_info:
            yield Finding(
                ERROR,
                role.field,
                f"{role.instance_type} does not exist in {ctx.aws.region}; pick another type or aws:region",
            )


def types_offered_in_az(ctx: Context) -> Iterable[Finding]:
    configured = ctx.cluster.availability_zone
    if configured:
        for role in ctx.roles:
            if role.instance_type in ctx.type_info and role.instance_type not in ctx.offerings.get(configured, set()):
                yield Finding(
                    ERROR,
                    role.field,
                    f"{role.instance_type} is not offered in {configured}; AZs offering it: "
                    f"{offered_list(ctx, role.instance_type)}. Change "
                    f"{AZ_FIELD} or the type",
                )
        return
    if not set(ctx.types) <= set(ctx.type_info):
        return  # types_exist said why
    if ctx.kept_az:
        problems = [
            kept_az_problem(
                ctx.kept_az,
                ctx.offered,
                ctx.cluster.head_node.instance_type,
                g.instance_type,
                configured=False,
                compute_field=g.field,
            )
            for g in ctx.groups
        ]
        problems = list(dict.fromkeys(p for p in problems if p))  # the head's problem once, not once a group
        for problem in problems:
            yield Finding(ERROR, *problem)
        if not problems:
            yield Finding(
                INFO, AZ_FIELD, f"none configured: the cluster stays in {ctx.kept_az}, kept since its first `pulumi up`"
            )
        return
    if ctx.az is None:
        detail = "; ".join(f"{t}: {offered_list(ctx, t)}" for t in ctx.types)
        yield Finding(
            ERROR,
            AZ_FIELD,
            f"no availability zone in {ctx.aws.region} offers all of {', '.join(ctx.types)} "
            f"({detail}); choose types offered together, or another region",
        )
        return
    good = sorted(az for az, have in ctx.offerings.items() if have >= set(ctx.types))
    others = f"; also possible: {', '.join(good[1:])}" if len(good) > 1 else ""
    yield Finding(
        INFO,
        AZ_FIELD,
        f"none configured: the cluster goes to {ctx.az}, the first AZ (sorted) offering all of "
        f"{', '.join(ctx.types)}, because every node and the file system must share one AZ "
        f"for EFA{others}. Set {AZ_FIELD} to pin it",
    )


def efa_support(ctx: Context) -> Iterable[Finding]:
    """Each group's `efa` against what EC2 says of its type in this region."""
    for g in ctx.groups:
        info = ctx.type_info.get(g.instance_type)
        if info is None:
            continue
        supported, field, efa = bool(info.get("NetworkInfo", {}).get("EfaSupported")), g.at("efa"), g.group.efa
        if efa is True and not supported:
            yield Finding(
                ERROR,
                field,
                f"EC2 says {g.instance_type} has no EFA in {ctx.aws.region}; "
                "remove `efa: true` to run over TCP, or pick an EFA type",
            )
        elif efa is False and supported:
            yield Finding(WARNING, field, efa_off(g.instance_type))
        elif efa is None and not supported:
            yield Finding(INFO, field, f"{g.instance_type} has no EFA: nodes talk over TCP")


def placement_strategy(ctx: Context) -> Iterable[Finding]:
    for role in ctx.roles:
        info = ctx.type_info.get(role.instance_type)
        if info is None:
            continue
        strategies = info.get("PlacementGroupInfo", {}).get("SupportedStrategies")
        if strategies is None:
            yield Finding(
                WARNING,
                role.field,
                f"EC2 does not say whether {role.instance_type} supports cluster placement "
                "groups; the launch may fail if it does not",
            )
        elif "cluster" not in strategies:
            yield Finding(
                ERROR,
                role.field,
                f"{role.instance_type} does not support the `cluster` placement strategy "
                f"(only {', '.join(strategies) or 'none'}); pick a type that does",
            )


def image_exists(ctx: Context) -> Iterable[Finding]:
    if ctx.image is None:
        yield Finding(
            ERROR,
            IMAGE_FIELD,
            f"{ctx.notes.get('image', 'no image found')}; pin an AMI with {IMAGE_FIELD}.amiId or choose another family",
        )


def image_architecture(ctx: Context) -> Iterable[Finding]:
    if ctx.image is None:
        return
    arch = ctx.image.get("Architecture")
    for role in _one_per_type(ctx.roles):
        info = ctx.type_info.get(role.instance_type)
        if info is None:
            continue
        archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
        if arch not in archs:
            yield Finding(
                ERROR,
                IMAGE_FIELD,
                f"{ctx.image['ImageId']} ({ctx.image.get('Name')}) is {arch}, but "
                f"{role.instance_type} runs {', '.join(archs)}; use an image for that",
            )


def image_supports_types(ctx: Context) -> Iterable[Finding]:
    if ctx.image is None:
        return
    name = ctx.image.get("Name") or ""
    base_oss = "Base OSS Nvidia Driver" in name
    for role in _one_per_type(ctx.roles):
        family = role.instance_type.split(".", 1)[0]
        info = ctx.type_info.get(role.instance_type) or {}
        gpus = sum(g.get("Count", 0) for g in info.get("GpuInfo", {}).get("Gpus", []))
        if not base_oss or family in BASE_OSS_SUPPORTED:
            continue
        if family.startswith("p3"):
            yield Finding(
                ERROR,
                IMAGE_FIELD,
                f"{name} does not list {role.instance_type}: its open-source NVIDIA "
                "kernel modules need Turing or newer, and the V100 is Volta. Pin an image "
                f"that supports V100 (older or proprietary-driver DLAMI) with {IMAGE_FIELD}.amiId",
            )
        elif family.startswith(("trn", "inf")):
            yield Finding(WARNING, IMAGE_FIELD, f"{name} has no Neuron SDK; {role.instance_type} needs a Neuron DLAMI")
        elif gpus:
            yield Finding(
                WARNING,
                IMAGE_FIELD,
                f"{name} does not list {role.instance_type} among its supported types; "
                "check the DLAMI release notes or pin an image that does",
            )


def placeholders_left(ctx: Context) -> Iterable[Finding]:
    """Example values still in the stack file (an example bucket, a documentation range, a `you@laptop` key)."""
    return placeholder_errors(ctx.cfg)


def containers_pinned(ctx: Context) -> Iterable[Finding]:
    """With containers on, the compute nodes download enroot's .debs and check each against its pinned sha256, the
    stack's containers.releaseDigests (templates/steps/containers.sh.j2): a .deb with none would fail every node's
    boot, so the deploy is refused here instead (infra/facts/containers.py require_pinned says which and how)."""
    c = ctx.cluster
    if not c.containers_on:
        return
    try:
        containers_facts.require_pinned((ctx.architecture,), c.containers.release_digests)
    except containers_facts.UnpinnedRelease as e:
        yield Finding(ERROR, containers_facts.DIGESTS_FIELD, str(e))


RULES = [
    placeholders_left,
    containers_pinned,
    config_findings,
    types_exist,
    type_facts,
    types_offered_in_az,
    efa_support,
    placement_strategy,
    image_exists,
    image_architecture,
    image_supports_types,
    vcpu_quota,
    dry_run_launch,
    capacity_reservation,
    price_list,
    shared_ssm_throughput,
    launch_rate,
]


def preflight(aws: Aws, cfg: StackConfig, now: Callable[[], datetime] = utc_now, pricing=None) -> list[Finding]:
    ctx = Context(aws, cfg, now=now, pricing=pricing)
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(ctx))
    return findings


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.is_error for f in findings)


SEVERITY_STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "cyan"}


def print_findings(console, findings: list[Finding]) -> None:
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    for f in sorted(findings, key=lambda f: order.get(f.severity, 3)):
        # Findings quote AWS's and the user's text (image names, filters): never read it as rich markup.
        console.print(
            f"[{SEVERITY_STYLE.get(f.severity, '')}]{f.severity}[/]: {escape(f.field)}: {escape(f.message)}",
            highlight=False,
        )
    errors = sum(f.is_error for f in findings)
    warnings = sum(f.severity == WARNING for f in findings)
    console.print(f"preflight: {errors} error(s), {warnings} warning(s)", highlight=False)

"""Every private moto and Pulumi name the offline plan uses, in this one module, each with why it is needed.

The plan runs the real program under Pulumi's mock runtime against moto, in one process. Public APIs cover most
of it; what is here is what seeding a region and the plan's speed need, and neither project promises to keep it.
tests/plan/test_internals.py checks each one still exists and behaves as used here, and names the package and
version when one does not, so an upgrade fails there, plainly, rather than in the middle of a plan.
"""

from __future__ import annotations

from importlib.metadata import version

__all__ = [
    "secret_signature",
    "add_managed_policies",
    "ami",
    "ec2_backend",
    "event_loop",
    "fresh_stack",
    "managed_policy_documents",
    "mock_monitor",
    "moto_error",
    "moto_errors",
    "root_resource",
    "run_instance",
    "run_program",
    "seed_public_parameter",
    "versions",
]

# Each name is imported where it is used, so that importing this module pulls in neither package (the embedded
# AWS alone, for `hpcc preflight --emulate`, needs no Pulumi; moto reads its settings when first imported).


def versions() -> str:
    return f"pulumi {version('pulumi')}, moto {version('moto')}"


# -- Pulumi -----------------------------------------------------------------------------------------------


def secret_signature() -> tuple[str, str]:
    """A secret on the wire is {key: signature, "value": ...}: the recorder unwraps it to read the inputs."""
    from pulumi.runtime import rpc

    return rpc._special_sig_key, rpc._special_secret_sig


def mock_monitor() -> type:
    """Pulumi's mock resource monitor, which the recorder extends (`set_mocks(monitor=...)` takes one) to see
    each RegisterResource request whole: its options and dependencies never reach `Mocks.new_resource`. The
    recorder uses its `mocks`, `resources` and `make_urn`."""
    from pulumi.runtime.mocks import MockMonitor

    return MockMonitor


def fresh_stack() -> None:
    """A new stack for the next program run in this process (several plans run in one process, as
    `pulumi.runtime.test` runs several tests): Pulumi has no public reset of its root resource and pending work."""
    from pulumi.runtime.settings import ROOT, SETTINGS

    ROOT.set(None)
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()


def event_loop():
    """Pulumi's own event loop, where registrations run (the runner gives it an executor it can drain)."""
    from pulumi.runtime.sync_await import _ensure_event_loop

    return _ensure_event_loop()


def run_program(fn) -> None:
    """Run `fn` as the stack's program to completion, on Pulumi's loop, as `pulumi.runtime.test` does:
    the public entry points (`pulumi.runtime.run_in_stack`) want a CLI-driven engine."""
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    _sync_await(run_pulumi_func(fn))


def root_resource():
    """The stack resource, whose outputs are the program's exports."""
    from pulumi.runtime.settings import get_root_resource

    return get_root_resource()


# -- moto -------------------------------------------------------------------------------------------------


def moto_errors() -> tuple[type[BaseException], ...]:
    """What moto's backends raise for a request AWS would refuse (its API layer turns them into AWS's errors)."""
    from moto.core.exceptions import ServiceException, _RESTError

    return ServiceException, _RESTError


def ec2_backend(account: str, region: str):
    """moto's EC2 state for a region: to add AMIs (no API creates a public image owned by another account)
    and to run instances without the XML round trip (see run_instance)."""
    from moto.ec2.models import ec2_backends

    return ec2_backends[account][region]


def ami(backend, **kwargs):
    """An AMI as moto stores it, owned by whoever `owner_id` says (the DLAMIs' publisher)."""
    from moto.ec2.models.amis import Ami

    return Ami(backend, **kwargs)


def seed_public_parameter(account: str, region: str, name: str, value: str, data_type: str) -> int:
    """A new version of a public parameter (/aws/service/...): moto refuses PutParameter under /aws/, as AWS
    does, so it goes straight into the store. Returns its version."""
    from moto.ssm.models import Parameter, ssm_backends

    history = ssm_backends[account][region]._parameters[name]
    history.append(
        Parameter(
            account_id=account,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=0,
            version=len(history) + 1,
            data_type=data_type,
        )
    )
    return len(history)


def add_managed_policies(account: str, documents: dict[str, dict]) -> None:
    """AWS managed policies by name: moto's full set of ~1,000 takes seconds to load, the program needs one."""
    from moto.iam.models import AWSManagedPolicy, iam_backends

    iam = iam_backends[account]["global"]
    for name, doc in documents.items():
        policy = AWSManagedPolicy.from_data(name, account, "global", doc)
        iam.managed_policies[policy.arn] = policy


def managed_policy_documents() -> dict[str, dict]:
    """moto's copy of every AWS managed policy (name -> its document record)."""
    import json

    from moto.iam.aws_managed_policies import aws_managed_policies_data

    return json.loads(aws_managed_policies_data)


def run_instance(
    account: str,
    region: str,
    *,
    image_id: str,
    instance_type: str,
    nic: dict,
    tags: dict,
    launch_template: dict,
    http_tokens: str,
    client_token: str,
):
    """RunInstances for one instance straight into moto's EC2 backend, with the arguments its API layer would
    pass (moto's private signature). The instance is the one boto3 reads back; what is skipped is only the XML
    round trip, ~7 of the ~9 ms a call costs, which at hundreds of nodes was a third of the plan."""
    reservation = ec2_backend(account, region).run_instances(
        image_id,
        1,
        None,
        [],
        instance_type=instance_type,
        is_instance_type_default=False,
        placement=None,
        placement_hostid=None,
        region_name=region,
        subnet_id=None,
        key_name=None,
        security_group_ids=[],
        nics=[nic],
        private_ip=None,
        associate_public_ip=None,
        tags={rt: dict(sorted(tags.items())) for rt in ("instance", "volume", "network-interface")},
        ebs_optimized=False,
        disable_api_stop=False,
        instance_market_options={},
        instance_initiated_shutdown_behavior=None,
        launch_template=launch_template,
        hibernation_options={},
        iam_instance_profile_name=None,
        iam_instance_profile_arn=None,
        monitoring_state="disabled",
        ipv6_address_count=None,
        metadata_options={"HttpTokens": http_tokens},
        client_token=client_token,
    )
    return reservation.instances[0]


def moto_error(exc: BaseException) -> tuple[str, str]:
    """(code, message) of one of moto_errors(), as AWS would answer."""
    code = getattr(exc, "code", None) or getattr(exc, "error_type", None) or type(exc).__name__
    return str(code), getattr(exc, "message", None) or str(exc)

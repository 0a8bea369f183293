"""What the program plans for a box config: the user data (the loader) per role, the bundle (archive, pointer,
bucket policy) and the role scripts in it, the settings value, and which node each line of the hosts parameter
names (a plan with compute instances), or the launch templates, the groups parameter, the ledger table and the
state bucket (a plan whose compute nodes the controller launches: contract19). Run in a child process
(`python -m tests.box.planned`): the plan's embedded moto and the box's moto server would share one process's
state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hpcc_contract.names import TAG_NODE

ROOT = Path(__file__).resolve().parents[2]


def plan_in_process(config_map: dict) -> dict:
    from infra.plan.embedded_aws import embedded_aws
    from infra.plan.runner import plan_config

    region = config_map["aws:region"]
    with embedded_aws(region) as aws:
        planned = plan_config(config_map, aws=aws)
        c = planned.config.cluster.name
        node_of_ip = {}
        for page in aws.client("ec2").get_paginator("describe_instances").paginate():
            for reservation in page["Reservations"]:
                for inst in reservation["Instances"]:
                    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                    node_of_ip[inst["PrivateIpAddress"]] = tags.get(TAG_NODE, "")
        params = {
            r["inputs"].get("name"): r["inputs"].get("value") for r in planned.of_type("aws:ssm/parameter:Parameter")
        }
        hosts = (params.get(f"/hpcc/{c}/hosts") or "").splitlines()
        bundle = planned.of_type("aws:s3/bucketObjectv2:BucketObjectv2")[0]["inputs"]
        templates = {
            r["name"]: {
                "name": r["inputs"].get("name") or r["name"],
                "userData": r["inputs"]["userData"],
                "tags": _template_tags(r["inputs"]),
            }
            for r in planned.of_type("aws:ec2/launchTemplate:LaunchTemplate")
        }
        tables = [r["inputs"].get("name") for r in planned.of_type("aws:dynamodb/table:Table")]
        buckets = [
            r["inputs"].get("bucket") or ""
            for r in planned.resources
            if r["type"].startswith("aws:s3/bucket") and "-state-" in (r["inputs"].get("bucket") or "")
        ]
        return {
            "userData": {
                role: planned.user_data[f"{c}-{role}-lt"]
                for role in ("head", "compute")
                if f"{c}-{role}-lt" in planned.user_data
            },
            "launchTemplates": templates,
            "groups": params.get(f"/hpcc/{c}/groups"),
            "ledgerTable": tables[0] if tables else "",
            "stateBucket": buckets[0] if buckets else "",
            "roleScripts": planned.role_scripts(),
            "bundleSha256": planned.bundle_sha256,
            "bundle": bundle["contentBase64"],
            "bundleKey": bundle["key"],
            "bundleBucket": bundle["bucket"],
            "bundlePointer": planned.named(f"{c}-bundle-param")["inputs"]["value"],
            "bucketPolicy": planned.named(f"{c}-bundles-policy")["inputs"]["policy"],
            "settings": planned.named(f"{c}-settings-param")["inputs"]["value"],
            "hostsNodes": [node_of_ip[ip] for ip in hosts],
        }


def _template_tags(inputs: dict) -> dict[str, str]:
    """The instance tags a launch template's tag specifications give at launch."""
    for spec in inputs.get("tagSpecifications") or []:
        if spec.get("resourceType") == "instance":
            return dict(spec.get("tags") or {})
    return {}


def plan(config_map: dict) -> dict:
    run = subprocess.run(
        [sys.executable, "-m", "tests.box.planned"],
        input=json.dumps(config_map),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if run.returncode != 0:
        raise RuntimeError(f"planning the box config failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout)


if __name__ == "__main__":
    print(json.dumps(plan_in_process(json.load(sys.stdin))))

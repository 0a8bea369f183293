"""The bundle (infra/render/bundle.py) and its store (infra/program/components/bundle.py): deterministic bytes, what
changes it and what does not, what the plan writes, and who may read it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

import pytest

from hpcc_contract.names import BUNDLES_PREFIX, bundle_bucket, role_name
from infra.config.parse import parse
from infra.render import bundle as bundle_mod
from infra.render.bundle import ROOT, build, pack, unpack
from tests.facts.instance_data import offline_facts

BASE = {
    "name": "bndl",
    "headNode": {"instanceType": "c5n.18xlarge"},
    "compute": {"instanceType": "p5.48xlarge", "count": 4},
}


def _build(cluster: dict | None = None):
    return build(parse("us-east-1", cluster or BASE).cluster, "us-east-1", offline_facts())


def test_the_archive_is_deterministic_sorted_owned_by_root_with_two_modes_and_no_time():
    first, second = _build(), _build()
    assert first.archive == second.archive and first.sha256 == second.sha256
    assert pack(dict(reversed(list(first.files.items())))) == first.archive  # the order files come in is irrelevant
    raw = gzip.decompress(first.archive)
    assert first.archive[4:8] == b"\0\0\0\0"  # gzip MTIME
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(first.files)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert {m.name: m.mode for m in members if m.mode == 0o755} == {"roles/compute.sh": 0o755, "roles/head.sh": 0o755}
    assert {m.mode for m in members} == {0o644, 0o755} and all(m.isfile() for m in members)


def test_the_bundle_holds_the_role_scripts_the_node_package_and_a_manifest_naming_their_digests():
    b = _build()
    manifest = b.manifest()
    contract = {p.relative_to(ROOT).as_posix() for p in (ROOT / "hpcc_contract").glob("*.py")}
    assert {
        "manifest.json",
        "roles/head.sh",
        "roles/compute.sh",
        "hpcc_node/__init__.py",
        "hpcc_contract/taxonomy.py",
        "hpcc_contract/version.py",
        "hpcc_contract/hosts.py",
        "hpcc_contract/settings.py",
        "examples/slurm/mpi.sbatch",
        "examples/slurm/torchrun.sbatch",
        "hpcc_node/health/xid_catalog.json",
    } | contract <= set(b.files)  # data the node package reads at run time
    assert not [p for p in b.files if p.startswith("infra/")]  # the contract whole, nothing of the program
    assert (manifest["format"], manifest["cluster"], manifest["agentVersion"]) == (2, "bndl", "1")
    assert manifest["hpccVersion"] == bundle_mod.hpcc_version() and manifest["hooks"] == {
        "onNodeStart": [],
        "onNodeReady": [],
    }
    for role in ("head", "compute"):
        assert manifest["roles"][role] == {
            "script": f"roles/{role}.sh",
            "bootDigest": hashlib.sha256(b.files[f"roles/{role}.sh"]).hexdigest(),
        }
    assert b.files["manifest.json"] == json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    assert not any(b"PRIVATE KEY" in content for content in b.files.values())


def test_a_count_only_change_leaves_the_bundle_alone_and_a_template_change_does_not(monkeypatch, tmp_path):
    before = _build()
    assert _build({**BASE, "compute": {**BASE["compute"], "count": 64}}).archive == before.archive
    # a template edited: a copy of templates/ with one line more in a step
    import shutil

    from infra.render import userdata

    shutil.copytree(userdata.TEMPLATES, tmp_path / "templates")
    step = tmp_path / "templates" / "steps" / "efa.sh.j2"
    step.write_text(step.read_text() + "efa_note() { :; }\n")
    monkeypatch.setattr(userdata, "TEMPLATES", tmp_path / "templates")
    userdata.environment.cache_clear()
    try:
        after = _build()
    finally:
        monkeypatch.undo()
        userdata.environment.cache_clear()
    assert after.sha256 != before.sha256 and b"efa_note" in after.files["roles/compute.sh"]


def test_unpack_refuses_anything_pack_would_not_make():
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        link = tarfile.TarInfo("roles/compute.sh")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(link)
    with pytest.raises(ValueError, match="not a plain relative file"):
        unpack(raw.getvalue())
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("../escape"), io.BytesIO(b""))
    with pytest.raises(ValueError, match="not a plain relative file"):
        unpack(raw.getvalue())


def test_two_plans_of_one_config_store_the_same_bundle_and_write_it_unpacked(tmp_path):
    from infra.plan.runner import plan_stack_file
    from tests.render.bootstrap_cases import ROOT

    first = plan_stack_file(ROOT / "examples" / "p5-llm.yaml")
    second = plan_stack_file(ROOT / "examples" / "p5-llm.yaml")
    assert first.bundle_sha256 == second.bundle_sha256 and first.bundle_files == second.bundle_files
    obj = first.of_type("aws:s3/bucketObjectv2:BucketObjectv2")
    assert len(obj) == 1 and obj[0]["inputs"]["key"] == f"bundles/{first.bundle_sha256}.tar.gz"
    pointer = json.loads(first.named("llm-bundle-param")["inputs"]["value"])
    assert pointer == {
        "sha256": first.bundle_sha256,
        "bucket": obj[0]["inputs"]["bucket"],
        "key": obj[0]["inputs"]["key"],
    }
    first.write(tmp_path)
    written = {
        p.relative_to(tmp_path / "bundle").as_posix(): p.read_bytes()
        for p in (tmp_path / "bundle").rglob("*")
        if p.is_file()
    }
    assert written == first.bundle_files
    assert (tmp_path / "bundle" / "roles" / "compute.sh").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "bundle.sha256").read_text().split()[0] == first.bundle_sha256
    assert sorted(p.name for p in (tmp_path / "user-data").iterdir()) == ["llm-compute-lt", "llm-head-lt"]
    # the instances boot after the pointer exists
    for inst in first.of_type("aws:ec2/instance:Instance"):
        assert "llm-bundle-param" in inst["dependsOn"], inst["dependsOn"]


def test_the_bucket_is_private_encrypted_versioned_and_readable_only_by_the_node_roles(planned):
    result, env = planned
    c = result.config.cluster.name
    s3 = env.client("s3")
    bucket = bundle_bucket(c, env.account)
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    roles = sorted(env.client("iam").get_role(RoleName=role_name(c, r))["Role"]["Arn"] for r in ("head", "compute"))
    assert [(s["Effect"], sorted(s["Principal"]["AWS"]), s["Action"], s["Resource"]) for s in policy["Statement"]] == [
        ("Allow", roles, ["s3:GetObject"], [f"arn:aws:s3:::{bucket}/{BUNDLES_PREFIX}*"])
    ]
    assert all(f":{env.account}:" in arn for arn in roles)  # nobody outside the account
    body = s3.get_object(Bucket=bucket, Key=f"bundles/{result.bundle_sha256}.tar.gz")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == result.bundle_sha256


def test_the_plans_s3_refuses_what_s3_would_and_moto_does_not():
    from infra.plan import aws_rules
    from infra.plan.aws_rules import AwsRejected

    for bad in ("Upper-case", "a..b", "xn--bucket", "bucket-s3alias", "10.0.0.1", "-dash", "ab"):
        with pytest.raises(AwsRejected, match="InvalidBucketName"):
            aws_rules.check_bucket_name("b", bad)
    aws_rules.check_bucket_name("b", "hpcc-" + "c" * 32 + "-bundles-123456789012")  # the longest hpcc makes: 58
    role = "arn:aws:iam::123456789012:role/hpcc-x-node"
    policy = {"Statement": [{"Effect": "Allow", "Principal": {"AWS": [role]}, "Action": "s3:GetObject"}]}
    aws_rules.check_bucket_policy("p", policy, {role}, blocks_public=True)
    with pytest.raises(AwsRejected, match="Invalid principal"):
        aws_rules.check_bucket_policy("p", policy, set(), blocks_public=True)
    public = {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject"}]}
    with pytest.raises(AwsRejected, match="BlockPublicPolicy"):
        aws_rules.check_bucket_policy("p", public, set(), blocks_public=True)


def test_the_program_and_the_policy_pack_agree_on_the_bundle_buckets_name():
    """The pack reads the contract's names as patterns (policy/records.py): every name the program gives parses."""
    from policy import bucket_rules

    for cluster in ("ab1", "a" * 32, "x-y-z"):
        m = bucket_rules.BUNDLE_BUCKET.match(bundle_bucket(cluster, "123456789012"))
        assert m and (m.group("cluster"), m.group("account")) == (cluster, "123456789012")


def test_containers_files_come_with_slurm_and_containers_on_and_the_role_scripts_install_them():
    names = {
        "containers/enroot.conf.instance-store",
        "containers/enroot.conf.root-volume",
        "containers/directories.instance-store",
        "containers/directories.root-volume",
        "containers/hooks.gpu",
        "containers/hooks.cpu",
        "containers/plugstack.conf",
        "containers/pyxis-importer",
        "containers/registries",
    }
    on = _build({**BASE, "scheduler": "slurm"})
    assert {p for p in on.files if p.startswith("containers/")} == names
    assert "enroot_configure" in on.files["roles/compute.sh"].decode()
    assert "plugstack.conf" in on.files["roles/head.sh"].decode()
    for cluster in (BASE, {**BASE, "scheduler": "slurm", "containers": {"enabled": False}}):
        off = _build(cluster)
        assert not [p for p in off.files if p.startswith("containers/")]
        assert "enroot_configure" not in off.files["roles/compute.sh"].decode()

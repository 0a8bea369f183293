"""The loader (the user data, templates/loader.sh.j2) run for real against a stand-in `aws`, in a private mount
namespace with a tmpfs over /opt (the machine's /opt/hpcc is never touched): a good bundle is unpacked whole and
its role script run; a bundle whose hash does not match, a malformed pointer and an unreachable object are
refused with a failed status of class `bundle`, and nothing of them runs."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from infra.render.bundle import pack
from infra.render.userdata import render_loader
from tests.render.bootstrap_fixtures import tool
from tests.render.bootstrap_shell import context

ROLE_SCRIPT = b'#!/bin/bash\necho "role script ran from $(readlink -f /opt/hpcc/current) bundle=$HPCC_BUNDLE"\n'


def bundle_archive(script: bytes = ROLE_SCRIPT) -> bytes:
    return pack({"roles/compute.sh": script, "manifest.json": b"{}\n"})


def pointer(sha: str, bucket: str = "hpcc-llm-bundles-123456789012", key: str | None = None) -> str:
    return json.dumps({"sha256": sha, "bucket": bucket, "key": key if key is not None else f"bundles/{sha}.tar.gz"})


def run_loader(tmp_path: Path, pointer_value: str, archive: bytes | None, fetch_rc: int = 0) -> tuple:
    """The compute loader with `aws` answering the pointer, serving `archive` (None: AccessDenied, always) and
    recording the statuses it puts in the state bucket; `sleep` records instead of sleeping. Returns (process, statuses,
    log, ls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "pointer").write_text(pointer_value)
    if archive is not None:
        (tmp_path / "object").write_bytes(archive)
    tool(
        bin_dir,
        "aws",
        f"""echo "$*" >>{tmp_path}/calls
case "$1 $2" in
  "ssm get-parameter") cat {tmp_path}/pointer ;;
  "s3api get-object") [ -f {tmp_path}/object ] || {{ echo "An error occurred (AccessDenied) when calling the" \\
                        "GetObject operation: Access Denied" >&2; exit 254; }}
                      cp {tmp_path}/object "${{@: -1}}" && echo '{{"ETag": "x"}}' ;;
  "sts get-caller-identity") echo 123456789012 ;;
  "s3api put-object") while [ $# -gt 0 ]; do
                        [ "$1" != --body ] || {{ cat "$2"; echo; }} >>{tmp_path}/statuses
                        [ "$1" != --key ] || echo "$2" >>{tmp_path}/status-keys
                        [ "$1" != --bucket ] || echo "$2" >>{tmp_path}/status-buckets
                        shift; done ;;
esac
""",
    )
    tool(bin_dir, "sleep", f'echo "$1" >>{tmp_path}/sleeps\n')
    tool(bin_dir, "curl", "exit 7\n")  # no IMDS here
    ctx = context(log_path=str(tmp_path / "bootstrap.log"))
    loader = tmp_path / "loader.sh"
    loader.write_text(render_loader(ctx))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HPCC_NODE_NAME": "compute-001",
        "HPCC_INSTANCE_ID": "i-0abc",
        "HPCC_NODE_IP": "10.0.16.12",
    }
    # The loader puts the system's directories first on PATH: the stand-ins are bound over the system's own there
    # (private namespace). After the run, what /opt/hpcc holds (the tmpfs vanishes with the namespace).
    stand_ins = "".join(
        f"for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin; do [ ! -e $d/{t} ] || "
        f"mount --bind {bin_dir}/{t} $d/{t}; done; "
        for t in ("aws", "sleep", "curl")
    )
    script = (
        f"mount -t tmpfs hpcc /opt && {stand_ins}bash {loader}; rc=$?; find /opt/hpcc | sort >{tmp_path}/ls; "
        f"readlink /opt/hpcc/current >{tmp_path}/current; exit $rc"
    )
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    statuses = (
        [json.loads(s) for s in (tmp_path / "statuses").read_text().splitlines()]
        if (tmp_path / "statuses").exists()
        else []
    )
    log = (tmp_path / "bootstrap.log").read_text() if (tmp_path / "bootstrap.log").exists() else ""
    return out, statuses, log, (tmp_path / "ls").read_text().split(), (tmp_path / "current").read_text().strip()


def test_a_matching_bundle_is_unpacked_whole_and_its_role_script_run(tmp_path):
    archive = bundle_archive()
    sha = hashlib.sha256(archive).hexdigest()
    out, statuses, log, listing, current = run_loader(tmp_path, pointer(sha), archive)
    assert out.returncode == 0, out.stderr + log
    assert f"role script ran from /opt/hpcc/bundles/{sha} bundle={sha}" in out.stdout
    assert current == f"/opt/hpcc/bundles/{sha}" and f"/opt/hpcc/bundles/{sha}/roles/compute.sh" in listing
    assert not [p for p in listing if "/.new." in p]  # the temporary directory is gone
    assert statuses == [] and f"bundle {sha} fetched and checked: {len(archive)} bytes in" in log


def test_a_bundle_whose_hash_does_not_match_is_refused_and_never_run(tmp_path):
    archive = bundle_archive(b'#!/bin/bash\necho "tampered bundle ran"\n')
    claimed = hashlib.sha256(b"another bundle").hexdigest()
    out, statuses, log, listing, current = run_loader(tmp_path, pointer(claimed), archive)
    assert out.returncode == 1 and "tampered bundle ran" not in out.stdout
    got = hashlib.sha256(archive).hexdigest()
    assert f"expected sha256 {claimed}, got {got} ({len(archive)} bytes)" in log
    [status] = statuses
    assert (
        status["node"],
        status["instanceId"],
        status["phase"],
        status["step"],
        status["class"],
        status["bundle"],
    ) == ("compute-001", "i-0abc", "failed", "bundle", "bundle", claimed)
    assert f"bundles/{claimed}.tar.gz refused" in status["message"] and status["logTail"]
    # the controller's fields, at the one key this instance's role may write
    assert (status["name"], status["instance_id"], status["ok"], status["failure"]) == (
        "compute-001",
        "i-0abc",
        False,
        "bundle",
    )
    assert (tmp_path / "status-keys").read_text().split() == [
        "status/arn:aws:ec2:us-east-1:123456789012:instance/i-0abc.json"
    ]
    assert (tmp_path / "status-buckets").read_text().split() == ["hpcc-llm-state-123456789012"]
    assert current == "" and listing == ["/opt/hpcc", "/opt/hpcc/bundles"]  # nothing unpacked, nothing left


@pytest.mark.parametrize(
    "value",
    [
        pointer("ab" * 32, key="bundles/other.tar.gz"),  # a key that is not the hash's own
        pointer("xyz"),  # not a sha256
        '{"sha256": "' + "ab" * 32 + '"}',  # no bucket
    ],
)
def test_a_malformed_pointer_is_refused_before_anything_is_fetched(tmp_path, value):
    out, statuses, log, _, _ = run_loader(tmp_path, value, bundle_archive())
    assert out.returncode == 1 and "role script ran" not in out.stdout
    assert [s["class"] for s in statuses] == ["bundle"] and "is not {" in statuses[0]["message"]
    assert "s3api get-object" not in (tmp_path / "calls").read_text()


def test_an_unreachable_bundle_is_retried_a_bounded_number_of_times_then_reported(tmp_path):
    sha = "cd" * 32
    out, statuses, log, listing, _ = run_loader(tmp_path, pointer(sha), None)
    assert out.returncode == 1
    fetches = [c for c in (tmp_path / "calls").read_text().splitlines() if c.startswith("s3api get-object")]
    assert len(fetches) == 8  # 8 tries, 7 pauses of 2 s doubling to 30 s, plus jitter up to as much again
    pauses = [int(s) for s in (tmp_path / "sleeps").read_text().split()]
    assert len(pauses) == 7 and all(lo <= p < 2 * lo for p, lo in zip(pauses, (2, 4, 8, 16, 30, 30, 30), strict=True))
    [status] = statuses
    assert status["class"] == "bundle" and "could not be fetched" in status["message"]
    assert "AccessDenied" in status["message"] and listing == ["/opt/hpcc", "/opt/hpcc/bundles"]


def test_the_loaders_imds_asks_what_the_bootstraps_imds_asks(tmp_path):
    """A deliberate copy (the loader stays small): both IMDSv2 functions, run with a stand-in curl, make the same
    token request and the same metadata request with that token."""
    import re

    from tests.render.bootstrap_shell import partial

    ctx = context()
    loader = re.search(r"^imds\(\) \{\n.*?^\}\n", render_loader(ctx), re.S | re.M).group(0)
    bootstrap = re.search(r"^imds\(\) \{\n.*?^\}\n", partial("identify", ctx), re.S | re.M).group(0)
    calls = []
    for name, fn in (("loader", loader), ("bootstrap", bootstrap)):
        bin_dir = tmp_path / name
        bin_dir.mkdir()
        tool(
            bin_dir,
            "curl",
            f'printf "%s|" "$@" >>{tmp_path}/{name}.calls; echo >>{tmp_path}/{name}.calls\n'
            'case "$*" in *api/token*) echo TOKEN ;; *) echo value ;; esac\n',
        )
        out = subprocess.run(
            ["bash", "-c", f"{fn}\nimds instance-id"],
            capture_output=True,
            text=True,
            env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        )
        assert out.stdout == "value\n", out.stderr
        calls.append([sorted(c.split("|")) for c in (tmp_path / f"{name}.calls").read_text().splitlines()])
    assert calls[0] == calls[1] and len(calls[0]) == 2

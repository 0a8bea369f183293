"""Root's cluster key and the login user's key through a rotation (hpcc_node/cluster_keys.py): the head's moves of the
staging labels on moto's Secrets Manager model (tests/node/cert_support.py), each safe to repeat; what a node installs
from them (real ssh-keygen); a node booting in the middle of a rotation; the bootstrap's call; the IAM the head needs
and the policy pack's rule for it. tests/ops/test_rotate_keys.py runs the whole rotation with every node's agent, and
tests/box/test_box_rotation.py with real sshd and a job's SSH."""

import json
import os
import pwd
import time
from pathlib import Path

from hpcc_node import certstore, cluster_keys, sshkeys
from tests.node.cert_support import FakeAws, node_keys, seed_keys
from tests.render.bootstrap_shell import partial
from tests.render.test_bootstrap_steps import COMMON, ctx_for, preamble

SECRET = "hpcc/llm/ssh-key"
RID = "20261125T050000Z"


def labels(aws: FakeAws, secret: str = SECRET) -> dict[str, list[str]]:
    return cluster_keys.versions(aws, secret)


def test_the_head_moves_the_labels_phase_by_phase_and_a_repeated_phase_changes_nothing():
    aws = FakeAws()
    first = seed_keys(aws)["/ssh-key"]
    (old,) = labels(aws)
    new = cluster_keys.token(SECRET, RID)
    assert cluster_keys.advance(aws, SECRET, "add", RID, "hpcc-llm") == f"{SECRET}: a new key, AWSPENDING"
    assert cluster_keys.advance(aws, SECRET, "add", RID, "hpcc-llm") == ""  # a head that came back: put once
    assert labels(aws) == {old: ["AWSCURRENT"], new: ["AWSPENDING"]}
    assert cluster_keys.staged(aws, SECRET)["AWSCURRENT"] == first.rstrip("\n") + "\n"
    assert cluster_keys.advance(aws, SECRET, "switch", RID, "hpcc-llm").endswith("the old one AWSPREVIOUS")
    assert cluster_keys.advance(aws, SECRET, "switch", RID, "hpcc-llm") == ""
    assert labels(aws) == {old: ["AWSPREVIOUS"], new: ["AWSCURRENT"]}
    assert cluster_keys.advance(aws, SECRET, "retire", RID, "hpcc-llm") == f"{SECRET}: the old key retired"
    assert cluster_keys.advance(aws, SECRET, "retire", RID, "hpcc-llm") == ""
    assert labels(aws) == {new: ["AWSCURRENT"]}
    assert set(cluster_keys.staged(aws, SECRET)) == {"AWSCURRENT"}
    assert cluster_keys.token(SECRET, "20261125T060000Z") != new  # the next rotation puts another version


def test_a_secret_with_no_key_yet_has_nothing_to_rotate():
    aws = FakeAws()  # the login user's secret stays empty on an image without that user
    assert all(cluster_keys.advance(aws, "hpcc/llm/user-key", p, RID, "hpcc-llm") == "" for p in certstore.PHASES)
    assert labels(aws, "hpcc/llm/user-key") == {}


def test_the_new_key_never_goes_on_a_command_line():
    aws, seen = FakeAws(), []
    seed_keys(aws)
    call = aws.call
    aws.call = lambda *args: seen.append(args) or call(*args)
    cluster_keys.advance(aws, SECRET, "add", RID, "hpcc-llm")
    (put,) = [a for a in seen if a[1] == "put-secret-value"]
    assert put[put.index("--secret-string") + 1].startswith("file://") and "PRIVATE" not in " ".join(put)


def test_a_node_logs_in_with_the_current_key_and_authorizes_every_labelled_one(tmp_path):
    aws = FakeAws()
    seed_keys(aws)
    keys = node_keys(aws, tmp_path, "compute-000")
    ssh = tmp_path / "compute-000" / "root" / ".ssh"
    # as the bootstrap's install_key left it, beside a key of the image's own (an EC2 key pair's) that stays
    current = cluster_keys.staged(aws, SECRET)["AWSCURRENT"]
    public = cluster_keys.public_of(current, "hpcc-llm")
    (ssh / "id_hpcc.pub").write_text(public + "\n")
    (ssh / "authorized_keys").write_text(
        f'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMine ec2-keypair\nfrom="10.0.0.0/16" {public}\n'
    )
    assert keys.follow("") == ["root", "alice"] and keys.follow("") == []  # again only when the phase changes
    cluster_keys.advance(aws, SECRET, "add", RID, "hpcc-llm")
    cluster_keys.advance(aws, SECRET, "switch", RID, "hpcc-llm")
    assert keys.follow(f"{RID}:switch") == ["root", "alice"]
    new = cluster_keys.staged(aws, SECRET)["AWSCURRENT"]
    assert (ssh / "id_hpcc").read_text() == new and oct((ssh / "id_hpcc").stat().st_mode)[-3:] == "600"
    lines = (ssh / "authorized_keys").read_text().splitlines()
    assert lines == [
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMine ec2-keypair",
        f'from="10.0.0.0/16" {cluster_keys.public_of(new, "hpcc-llm")}',
        f'from="10.0.0.0/16" {public}',
    ]
    assert keys.installed["root"].identity == certstore.fingerprint(cluster_keys.public_of(new, "hpcc-llm"))
    assert len(keys.installed["root"].authorized) == 2
    cluster_keys.advance(aws, SECRET, "retire", RID, "hpcc-llm")
    keys.follow(f"{RID}:retire")
    assert (ssh / "authorized_keys").read_text().splitlines()[1:] == [
        f'from="10.0.0.0/16" {cluster_keys.public_of(new, "hpcc-llm")}'
    ]


def test_the_key_files_ssh_offers_are_never_rewritten_while_their_key_has_a_label(tmp_path):
    """ssh reads an identity's public half at start and its private half to sign: a slot rewritten in between
    fails that login (the box's rotation saw it). Each key keeps its slot from add to retire."""
    aws = FakeAws()
    seed_keys(aws)
    keys = node_keys(aws, tmp_path, "compute-000")
    ssh = tmp_path / "compute-000" / "root" / ".ssh"
    keys.follow("")
    old = cluster_keys.staged(aws, SECRET)["AWSCURRENT"]
    a, b = (ssh / slot for slot in cluster_keys.SLOTS)
    assert a.read_text() == old and not b.exists() and oct(a.stat().st_mode)[-3:] == "600"
    assert (ssh / "id_hpcc_a.pub").read_text() == cluster_keys.public_of(old, "hpcc-llm") + "\n"
    held = a.stat().st_ino
    for phase in certstore.PHASES:
        cluster_keys.advance(aws, SECRET, phase, RID, "hpcc-llm")
        keys.follow(f"{RID}:{phase}")
        new = cluster_keys.staged(aws, SECRET).get("AWSPENDING") or cluster_keys.staged(aws, SECRET)["AWSCURRENT"]
        if phase != "retire":  # the old key in its slot, the very same file; the new one beside it
            assert a.read_text() == old and a.stat().st_ino == held and b.read_text() == new, phase
    assert not a.exists() and not (ssh / "id_hpcc_a.pub").exists() and b.read_text() == new  # the old key gone
    assert (ssh / "id_hpcc").read_text() == new
    assert cluster_keys.assign_slots({"id_hpcc_a": "", "id_hpcc_b": new}, ["k3", new]) == {
        "id_hpcc_b": new,
        "id_hpcc_a": "k3",
    }


def test_a_node_booting_during_a_switch_lets_in_both_the_switched_nodes_and_the_others(tmp_path):
    """A replacement of a node that died in the middle of a rotation: it boots after the switch began."""
    aws = FakeAws()
    seed_keys(aws)
    old = cluster_keys.public_of(cluster_keys.staged(aws, SECRET)["AWSCURRENT"], "hpcc-llm")
    for phase in ("add", "switch"):
        cluster_keys.advance(aws, SECRET, phase, RID, "hpcc-llm")
    new = cluster_keys.public_of(cluster_keys.staged(aws, SECRET)["AWSCURRENT"], "hpcc-llm")
    node_keys(aws, tmp_path, "compute-009").follow("boot")
    text = (tmp_path / "compute-009" / "root" / ".ssh" / "authorized_keys").read_text()
    assert old.split()[1] in text and new.split()[1] in text


def test_a_login_user_without_a_key_file_on_the_node_is_passed_over(tmp_path):
    aws = FakeAws()
    seed_keys(aws)
    keys = node_keys(aws, tmp_path, "compute-000")
    os.unlink(
        tmp_path / "compute-000" / "alice" / ".ssh" / "id_hpcc"
    )  # the bootstrap installed none (a system account)
    assert keys.follow("") == ["root"]
    root = keys.home_of("root")
    keys.home_of = lambda user: root if user == "root" else pwd.getpwnam(user)  # no such user on this machine
    keys.login_user = lambda: "hpcc-nobody-here"
    assert keys.follow(f"{RID}:add") == ["root"]


def test_the_bootstrap_installs_through_the_agents_own_code_after_its_keys():
    rendered = partial("ssh", ctx_for(Path("/tmp")))
    assert "python3 -m hpcc_node.cluster_keys \"llm\" \"$HPCC_VPC_CIDR\" \"$HPCC_LOGIN_USER\"" in rendered
    body = rendered[rendered.index("step_ssh() {") :]
    assert body.index("install_key /root root") < body.index("  cluster_keys\n") < body.index("host_certs")


def test_only_the_head_may_move_its_own_key_secrets_labels():
    from hpcc_contract.names import Paths
    from infra.program.components.identity import node_policy
    from policy import write_rules

    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hpcc/llm/ssh-key-AbCdEf"
    head = json.loads(node_policy("us-east-1", "123456789012", Paths("llm"), arn, "head"))["Statement"]
    compute = json.loads(node_policy("us-east-1", "123456789012", Paths("llm"), arn, "compute"))["Statement"]
    sid = {s["Sid"]: s for s in head}["ClusterSshKey"]
    assert "secretsmanager:UpdateSecretVersionStage" in sid["Action"]
    assert not any("secretsmanager:UpdateSecretVersionStage" in s.get("Action", []) for s in compute)
    assert write_rules.statement_problems("llm", True, sid) == []
    assert any("only the head moves the labels" in p for p in write_rules.statement_problems("llm", False, sid))
    host_ca = dict(sid, Resource=[arn.replace("ssh-key", "host-ca")])
    assert any("only the head moves the labels" in p for p in write_rules.statement_problems("llm", True, host_ca))


def test_the_command_line_entry_says_its_usage():
    assert cluster_keys.main(["cluster_keys"]) == 2


def test_the_bootstraps_install_key_and_the_python_install_leave_the_same_files(fake, tmp_path):
    """The ssh step writes the keys in bash first (install_key), then hpcc_node.cluster_keys installs what the
    labels say: outside a rotation the Python install changes none of what bash wrote, and a second run of either
    changes nothing."""
    from tests.render.bootstrap_shell import run

    _, _, env = fake
    private, _ = sshkeys.key_pair("hpcc-llm")
    (tmp_path / "k").write_text(private)
    bash_home, py_home = tmp_path / "bash", tmp_path / "py"
    for home in (bash_home, py_home):
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMine ec2-keypair\n")
    script = preamble(tmp_path) + f'HPCC_KEY=$(cat {tmp_path / "k"})\ninstall_key {bash_home} "$(id -un)"'
    out = run(COMMON + ["ssh"], script, ctx_for(tmp_path), env=env)
    assert out.returncode == 0, out.stderr
    cluster_keys.install(str(py_home), os.getuid(), os.getgid(), {"AWSCURRENT": private}, "10.0.0.0/16", "hpcc-llm")
    times = {f.name: f.stat().st_mtime_ns for f in (py_home / ".ssh").iterdir()}
    time.sleep(0.05)
    cluster_keys.install(str(py_home), os.getuid(), os.getgid(), {"AWSCURRENT": private}, "10.0.0.0/16", "hpcc-llm")
    assert {f.name: f.stat().st_mtime_ns for f in (py_home / ".ssh").iterdir()} == times  # a rerun writes nothing
    for name in ("id_hpcc", "id_hpcc.pub", "authorized_keys"):
        assert (py_home / ".ssh" / name).read_text() == (bash_home / ".ssh" / name).read_text(), name
        assert (py_home / ".ssh" / name).stat().st_mode & 0o777 == (bash_home / ".ssh" / name).stat().st_mode & 0o777
    cluster_keys.install(str(bash_home), os.getuid(), os.getgid(), {"AWSCURRENT": private}, "10.0.0.0/16", "hpcc-llm")
    assert (bash_home / ".ssh" / "authorized_keys").read_text() == (py_home / ".ssh" / "authorized_keys").read_text()

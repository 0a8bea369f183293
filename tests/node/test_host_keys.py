"""Host-key verification between nodes, with this machine's real OpenSSH: each node's host keys are certified by
the cluster's host CA (hpcc_node/certs.py: the head signs what the node published, for 7 days), and the client config
the bootstrap writes accepts only hosts that present such a certificate, still valid, for the address they are reached
at. A machine that takes over a node's old IP, an expired certificate, and after a rotation's retire a certificate by
the old CA, are refused; during the rotation both CAs are accepted.

The certificates are made with the real ssh-keygen by the head's and the node's code (tests/node/cert_support.py's AWS
stand-in); then everything runs in a private mount and network namespace: an overlay over /etc/ssh (the template's
own paths: known-hosts file and drop-ins), a tmpfs /run, and the node's address 10.0.0.6 on the namespace's
loopback, where a throwaway sshd listens on port 22."""

import shlex
import subprocess
import time
from pathlib import Path

from hpcc_contract.names import Paths
from hpcc_node import certs, certstore
from tests.node.cert_support import FakeAws, host_keys, make_head, make_node, member
from tests.render.bootstrap_shell import partial, settings_shell
from tests.render.test_bootstrap_steps import COMMON, ctx_for, preamble

HOSTS = [member(n, ip) for n, ip in (("head", "10.0.0.4"), ("compute-000", "10.0.0.5"), ("compute-001", "10.0.0.6"))]
STUB_FAIL = 'fail() { echo "FAIL: $*"; exit 1; }\n'
# The node's client side as the ssh step leaves it: the known-hosts file the node agent wrote, the client config.
# serve NAME KEYDIR [LINE...]: an sshd on 10.0.0.6:22 with KEYDIR's host keys and certificates (the one before is
# stopped first). reach NAME: root@10.0.0.6 with the cluster key, as a node's ssh/mpirun/torchrun reach a peer.
NODE = """ip link set lo up && ip addr add 10.0.0.6/32 dev lo
mkdir -p /run/sshd /etc/ssh/ssh_config.d
trust() { cp "$1" "$HPCC_KNOWN_HOSTS"; }
client_config 10.0.0.4 10.0.0.5 10.0.0.6 | write_file /etc/ssh/ssh_config.d/50-hpcc.conf 0644
ssh-keygen -q -t ed25519 -N "" -f "$T/cluster" && cp "$T/cluster.pub" "$T/authorized_keys"
serve() {
  local conf=$T/sshd-$1.conf pid key; shift
  if pid=$(cat /run/sshd-test.pid 2>/dev/null); then
    kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
  { printf '%s\\n' "ListenAddress 10.0.0.6" "AuthorizedKeysFile $T/authorized_keys" "StrictModes no" \\
      "PidFile /run/sshd-test.pid"
    for key in "$1"/ssh_host_*_key; do
      echo "HostKey $key"; [ ! -f "$key-cert.pub" ] || echo "HostCertificate $key-cert.pub"
    done
    shift; printf '%s\\n' "$@"; } >"$conf"
  rm -f /run/sshd-test.pid
  /usr/sbin/sshd -f "$conf"
  for _ in $(seq 50); do [ -s /run/sshd-test.pid ] && break; sleep 0.1; done  # written once it listens
}
trap 'kill "$(cat /run/sshd-test.pid 2>/dev/null)" 2>/dev/null || true' EXIT
reach() {
  echo "== $1"
  ssh -v -o BatchMode=yes -o ConnectTimeout=5 -i "$T/cluster" root@10.0.0.6 'echo reached' 2>&1 \\
    | grep -v '^debug1: [^SC]' && echo rc=0 || echo "rc=$?"
}
"""


def namespaced(tmp_path: Path, script: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """SCRIPT after the ssh step's partials, in a private mount + network namespace (see the module's doc)."""
    ctx = ctx_for(tmp_path)
    body = "\n".join(partial(p, ctx) for p in COMMON + ["ssh"]) + "\n" + settings_shell(ctx.settings)
    upper, work = tmp_path / "overlay" / "upper", tmp_path / "overlay" / "work"
    upper.mkdir(parents=True)
    work.mkdir()
    path = tmp_path / "script.sh"
    path.write_text(
        f"#!/bin/bash\nset -euo pipefail\n{body}\n{preamble(tmp_path)}{STUB_FAIL}"
        f"T={shlex.quote(str(tmp_path))}\n{NODE}{script}\n"
    )
    setup = (
        f"mount -t overlay hpcc -o lowerdir=/etc/ssh,upperdir={upper},workdir={work} /etc/ssh && "
        "mount -t tmpfs hpcc /run && "
    )
    return subprocess.run(
        ["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", f"{setup}exec bash {path}"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cases(out: str) -> dict[str, tuple[int, str]]:
    """`== NAME` ... `rc=N` blocks of the script's output: each case's exit status and what ssh printed."""
    found = {}
    for block in out.split("== ")[1:]:
        name, rest = block.split("\n", 1)
        text, rc = rest.rsplit("rc=", 1)
        found[name] = (int(rc.split()[0]), text)
    return found


def refused(found, name, why):
    rc, text = found[name]
    assert rc == 255 and "reached" not in text.replace("Connection", ""), (name, text)
    assert why in text, (name, text)


def signed_cluster(tmp_path: Path, now: float):
    """The head and node compute-001 (10.0.0.6) after the head signed what the node published."""
    aws = FakeAws()
    head, node = make_head(aws), make_node(aws, tmp_path, "compute-001", "10.0.0.6")
    node.publish()
    head.sign_pending(HOSTS, now)
    node.install(head.issued["compute-001"])
    return aws, head, node


def test_a_certified_node_is_reached_and_whatever_else_holds_its_address_is_refused(tmp_path):
    now = time.time()
    aws, head, node = signed_cluster(tmp_path, now)
    ca = certstore.read_authority(aws.secrets["hpcc/llm/host-ca"]).signer["private"]
    stranger = tmp_path / "stranger"  # took over the address: no certificate
    host_keys(stranger, ("ed25519",))
    peer = tmp_path / "peer"  # another node of the cluster, certified for its own address
    [key] = host_keys(peer, ("ed25519",))
    (peer / f"{key.name}-cert.pub").write_text(
        certs.sign(
            ca,
            key.with_suffix(".pub").read_text(),
            "llm/compute-002",
            certs.principals("compute-002", "10.0.0.7"),
            now - 60,
            now + 3600,
        )
        + "\n"
    )
    expired = tmp_path / "expired"  # this node, with a certificate that has run out (a copied key and cert, later)
    [key] = host_keys(expired, ("ed25519",))
    (expired / f"{key.name}-cert.pub").write_text(
        certs.sign(
            ca,
            key.with_suffix(".pub").read_text(),
            "llm/compute-001",
            certs.principals("compute-001", "10.0.0.6"),
            now - 8 * 86400,
            now - 86400,
        )
        + "\n"
    )
    other = tmp_path / "other"  # another cluster's CA, for this node's address
    [key] = host_keys(other, ("ed25519",))
    (other / f"{key.name}-cert.pub").write_text(
        certs.sign(
            certs.new_key_pair()["private"],
            key.with_suffix(".pub").read_text(),
            "x/compute-001",
            certs.principals("compute-001", "10.0.0.6"),
            now - 60,
            now + 3600,
        )
        + "\n"
    )
    script = f"""trust {node.known_hosts}
serve node {tmp_path}/compute-001
reach node
# a crypto policy listing plain keys first, after 50-hpcc.conf (Amazon Linux 2023)
plain_first=ecdsa-sha2-nistp256,ssh-ed25519,ecdsa-sha2-nistp256-cert-v01@openssh.com,ssh-ed25519-cert-v01@openssh.com
echo "HostKeyAlgorithms $plain_first" >/etc/ssh/ssh_config.d/50-redhat.conf
reach crypto-policy
rm /etc/ssh/ssh_config.d/50-redhat.conf
for name in stranger peer expired other; do serve "$name" "$T/$name"; reach "$name"; done
"""
    out = namespaced(tmp_path, script)
    assert out.returncode == 0, out.stdout + out.stderr
    found = cases(out.stdout)
    for name in ("node", "crypto-policy"):
        assert found[name][0] == 0 and "reached\n" in found[name][1], found[name]
    assert "Server host certificate: ssh-ed25519-cert-v01@openssh.com" in found["node"][1]
    refused(found, "stranger", "no matching host key type found")  # nothing to offer at all
    refused(found, "peer", "Certificate invalid: name is not a listed principal")
    refused(found, "expired", "Certificate invalid: expired")
    refused(found, "other", "Host key verification failed.")


def test_during_a_rotation_both_cas_are_accepted_and_after_retire_the_old_is_refused(tmp_path):
    now = time.time()
    aws, head, node = signed_cluster(tmp_path, now)
    old_node = tmp_path / "old"  # the node as it was, certified by the old CA
    old_node.mkdir()
    for p in (tmp_path / "compute-001").glob("ssh_host_*"):
        (old_node / p.name).write_bytes(p.read_bytes())
        (old_node / p.name).chmod(0o600)
    rid = "20261124T140000Z"
    head.sign_pending(HOSTS, now + 1, certstore.Rotation(rid, "add"))
    node.install(head.issued["compute-001"])
    (tmp_path / "trust-add").write_text(Path(node.known_hosts).read_text())
    head.sign_pending(HOSTS, now + 2, certstore.Rotation(rid, "switch"))
    node.install(head.issued["compute-001"])  # now certified by the new CA
    head.sign_pending(HOSTS, now + 3, certstore.Rotation(rid, "retire"))
    node.install(head.issued["compute-001"])
    (tmp_path / "trust-retire").write_text(Path(node.known_hosts).read_text())
    script = """trust $T/trust-add
serve old $T/old
reach add-old
serve new $T/compute-001
reach add-new
trust $T/trust-retire
reach retire-new
serve old $T/old
reach retire-old
"""
    out = namespaced(tmp_path, script)
    assert out.returncode == 0, out.stdout + out.stderr
    found = cases(out.stdout)
    assert (
        len([line for line in (tmp_path / "trust-add").read_text().splitlines() if line.startswith("@cert-authority")])
        == 2
    )
    for name in ("add-old", "add-new", "retire-new"):
        assert found[name][0] == 0 and "reached\n" in found[name][1], (name, found[name])
    refused(found, "retire-old", "Host key verification failed.")


def test_a_certificate_renewed_at_half_life_is_served_after_the_reload(tmp_path):
    now = time.time()
    aws, head, node = signed_cluster(tmp_path, now - 4 * 86400)  # signed four days ago: past half its life
    first = head.issued["compute-001"]
    keys = tmp_path / "compute-001"
    kept = {p.name: p.read_text() for p in keys.glob("*-cert.pub")}
    assert head.sign_pending(HOSTS, now) == ["compute-001"]
    renewed = head.issued["compute-001"]
    assert node.install(renewed)[1]  # what the agent's tick does; the files are put back for the "before" case
    (tmp_path / "renewed").mkdir()
    for name, text in kept.items():
        (tmp_path / "renewed" / name).write_text((keys / name).read_text())
        (keys / name).write_text(text)
    script = f"""trust {node.known_hosts}
serve node $T/compute-001
reach before
cp $T/renewed/*-cert.pub $T/compute-001/ && kill -HUP "$(cat /run/sshd-test.pid)" && sleep 1
reach after
"""
    out = namespaced(tmp_path, script)
    assert out.returncode == 0, out.stdout + out.stderr
    found = cases(out.stdout)

    def valid(ts: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))  # ssh -v prints local time

    assert f"valid from {valid(first.valid_from)} to {valid(first.valid_to)}" in found["before"][1], found["before"]
    assert f"valid from {valid(renewed.valid_from)} to {valid(renewed.valid_to)}" in found["after"][1], found["after"]


def test_known_hosts_path_is_the_templates():
    rendered = partial("ssh", ctx_for(Path("/tmp")))
    assert f"HPCC_KNOWN_HOSTS={certs.KNOWN_HOSTS}\n" in rendered


def test_the_login_users_key_is_its_own_and_does_not_open_root(tmp_path):
    """The ssh step itself (its AWS calls and the user's account stood in for; /root a tmpfs of the namespace): root
    gets the cluster key, the login user the user key; root@node accepts the cluster key only."""
    aws, head, node = signed_cluster(tmp_path, time.time())
    script = f"""mount -t tmpfs hpcc /root
ssh-keygen -q -t ed25519 -N "" -f "$T/user"
aws_retry() {{
  case "$*" in
    *{Paths("llm").ssh_secret}*) cat "$T/cluster";;
    *{Paths("llm").user_secret}*) cat "$T/user";;
    *) return 9;;
  esac
}}
regular_user() {{ return 0; }}
id() {{ return 0; }}
getent() {{ echo "$HPCC_LOGIN_USER:x:1000:1000::$T/home:/bin/bash"; }}
chown() {{ :; }}
host_certs() {{ HPCC_HOST_CERTS=(); }}
reload_sshd() {{ :; }}
cluster_keys() {{ :; }}  # a rotation's labels: tests/node/test_cluster_keys.py
mkdir -p "$T/home"
HPCC_HOSTS=(10.0.0.4 10.0.0.5 10.0.0.6)
step_ssh
cmp -s /root/.ssh/id_hpcc "$T/cluster" && echo "root holds the cluster key"
cmp -s "$T/home/.ssh/id_hpcc" "$T/user" && echo "the login user holds its own key"
grep -qF "$(cut -d' ' -f2 "$T/user.pub")" /root/.ssh/authorized_keys || echo "root does not accept the user key"
grep -qF "$(cut -d' ' -f2 "$T/cluster.pub")" "$T/home/.ssh/authorized_keys" \\
  || echo "the login user does not accept root's key"
trust {node.known_hosts}
serve node $T/compute-001 "AuthorizedKeysFile .ssh/authorized_keys"
reach root-with-cluster-key
mv /root/.ssh/id_hpcc /root/.ssh/id_hpcc.away  # the login user cannot read it: only its own key is offered
echo "== root-with-user-key"
ssh -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=5 -i "$T/user" root@10.0.0.6 'echo reached' 2>&1 \\
  && echo rc=0 || echo "rc=$?"
"""
    out = namespaced(tmp_path, script)
    assert out.returncode == 0, out.stdout + out.stderr
    for line in (
        "root holds the cluster key",
        "the login user holds its own key",
        "root does not accept the user key",
        "the login user does not accept root's key",
    ):
        assert line in out.stdout, out.stdout
    found = cases(out.stdout)
    assert found["root-with-cluster-key"][0] == 0 and "reached\n" in found["root-with-cluster-key"][1], found
    refused(found, "root-with-user-key", "Permission denied (publickey")

"""Host-key verification between nodes, with this machine's real OpenSSH: each node's host keys are certified
by the cluster key (an OpenSSH host CA), and the client config the bootstrap writes accepts only hosts that
present such a certificate for the address they are reached at. A machine that takes over a node's old IP
(a terminated spot node's address reused in the VPC) is refused.

Everything runs in a private mount and network namespace: an overlay over /etc/ssh (the template's own paths:
the node's host keys, certificates, known-hosts file and drop-ins), a tmpfs /run, and the node's address
10.0.0.6 on the namespace's loopback, where a throwaway sshd listens on port 22."""

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.bootstrap_shell import partial, settings_shell
from tests.test_bootstrap_steps import COMMON, ctx_for, preamble

STUB_FAIL = 'fail() { echo "FAIL: $*"; exit 1; }\n'
# A node as the ssh step leaves it: fresh host keys, certified by the cluster key; the client config for the
# cluster's addresses; the sshd drop-in. The cluster key stands in for /root/.ssh/id_hpcc.
NODE = """ip link set lo up && ip addr add 10.0.0.6/32 dev lo
mkdir -p /run/sshd /etc/ssh/ssh_config.d /etc/ssh/sshd_config.d
new_host_keys() {  # no RSA key (slow to make): sshd -T still names it, and a missing key is passed over
  rm -f /etc/ssh/ssh_host_*
  for t in ecdsa ed25519; do ssh-keygen -q -t "$t" -N "" -f "/etc/ssh/ssh_host_${t}_key"; done
}
new_host_keys
ssh-keygen -q -t ed25519 -N "" -C hpcc-llm -f "$T/cluster"
become_node() {
  host_certs "$T/cluster"
  known_hosts "$T/cluster.pub" | write_file "$HPCC_KNOWN_HOSTS" 0644
  client_config 10.0.0.4 10.0.0.5 10.0.0.6 | write_file /etc/ssh/ssh_config.d/50-hpcc.conf 0644
  sshd_hardening "${HPCC_HOST_CERTS[@]}" | write_file /etc/ssh/sshd_config.d/01-hpcc.conf 0644
}
"""


def namespaced(tmp_path: Path, script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """SCRIPT after the ssh step's partials, in a private mount + network namespace (see the module's doc)."""
    ctx = ctx_for(tmp_path)
    body = "\n".join(partial(p, ctx) for p in COMMON + ["ssh"]) + "\n" + settings_shell(ctx.settings)
    upper, work = tmp_path / "overlay" / "upper", tmp_path / "overlay" / "work"
    upper.mkdir(parents=True)
    work.mkdir()
    path = tmp_path / "script.sh"
    path.write_text(f"#!/bin/bash\nset -euo pipefail\n{body}\n{preamble(tmp_path)}{STUB_FAIL}"
                    f"T={shlex.quote(str(tmp_path))}\n{NODE}{script}\n")
    setup = (f"mount -t overlay hpcc -o lowerdir=/etc/ssh,upperdir={upper},workdir={work} /etc/ssh && "
             "mount -t tmpfs hpcc /run && ")
    return subprocess.run(["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c",
                           f"{setup}exec bash {path}"], capture_output=True, text=True, timeout=timeout)


def cases(out: str) -> dict[str, tuple[int, str]]:
    """`== NAME` ... `rc=N` blocks of the script's output: each case's exit status and what ssh printed."""
    found = {}
    for block in out.split("== ")[1:]:
        name, rest = block.split("\n", 1)
        text, rc = rest.rsplit("rc=", 1)
        found[name] = (int(rc.split()[0]), text)
    return found


# serve NAME LINE...: an sshd on 10.0.0.6:22 with these configuration lines (the one before is stopped first).
# reach NAME: root@10.0.0.6 with the cluster key, as a node's ssh/mpirun/torchrun reach a peer (BatchMode).
SERVE = """serve() {
  local conf=$T/sshd-$1.conf pid; shift
  if pid=$(cat /run/sshd-test.pid 2>/dev/null); then kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; fi
  printf '%s\\n' "ListenAddress 10.0.0.6" "AuthorizedKeysFile $T/authorized_keys" "StrictModes no" \\
    "PidFile /run/sshd-test.pid" "$@" >"$conf"
  /usr/sbin/sshd -f "$conf"
}
trap 'kill "$(cat /run/sshd-test.pid 2>/dev/null)" 2>/dev/null || true' EXIT
reach() { echo "== $1"; ssh -o BatchMode=yes -o ConnectTimeout=5 -i "$T/cluster" root@10.0.0.6 'echo reached' 2>&1 && echo rc=0 || echo "rc=$?"; }
cp "$T/cluster.pub" "$T/authorized_keys"
"""


def test_a_certified_node_is_reached_and_whatever_else_holds_its_address_is_refused(tmp_path):
    script = SERVE + """become_node
serve node "Include /etc/ssh/sshd_config.d/01-hpcc.conf"
reach node
cut -d" " -f2 /etc/ssh/ssh_host_ed25519_key.pub >"$T/node-key"
# A system-wide crypto policy listing plain keys first, included after 50-hpcc.conf (as on Amazon Linux 2023)
echo "HostKeyAlgorithms ecdsa-sha2-nistp256,ssh-ed25519,ecdsa-sha2-nistp256-cert-v01@openssh.com,ssh-ed25519-cert-v01@openssh.com" \\
  >/etc/ssh/ssh_config.d/50-redhat.conf
reach crypto-policy
rm /etc/ssh/ssh_config.d/50-redhat.conf
echo "== laptop"  # someone's own client outside the cluster, knowing nothing of the CA
ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile="$T/laptop" \\
  -i "$T/cluster" root@10.0.0.6 true 2>&1 && echo rc=0 || echo "rc=$?"
new_host_keys && become_node  # replaced: new host keys, certified at boot; nothing on the clients changes
serve node "Include /etc/ssh/sshd_config.d/01-hpcc.conf"
reach replaced
ssh-keygen -q -t ed25519 -N "" -f "$T/stranger"  # took over the address: no certificate
serve stranger "HostKey $T/stranger"
reach stranger
ssh-keygen -q -t ed25519 -N "" -f "$T/peer"  # another node of the cluster, certified for its own address
host_cert "$T/peer" "$T/cluster" llm/compute-002/i-0def compute-002,10.0.0.7
serve peer "HostKey $T/peer" "HostCertificate $T/peer-cert.pub"
reach peer
ssh-keygen -q -t ed25519 -N "" -f "$T/other-ca" && ssh-keygen -q -t ed25519 -N "" -f "$T/other"
host_cert "$T/other" "$T/other-ca" other/compute-001/i-0fff compute-001,10.0.0.6  # another cluster's node
serve other "HostKey $T/other" "HostCertificate $T/other-cert.pub"
reach other
"""
    out = namespaced(tmp_path, script)
    assert out.returncode == 0, out.stdout + out.stderr
    found = cases(out.stdout)
    assert found["node"] == (0, "reached\n"), found["node"]
    assert found["replaced"] == (0, "reached\n"), found["replaced"]
    assert found["crypto-policy"] == (0, "reached\n"), found["crypto-policy"]
    for name in ("stranger", "peer", "other"):  # the "reused IP": refused before any command or environment goes
        rc, text = found[name]
        assert rc == 255 and "reached" not in text, (name, text)
    assert "no matching host key type found" in found["stranger"][1]  # it has no certificate to offer at all
    assert "Certificate invalid: name is not a listed principal" in found["peer"][1]
    assert "Host key verification failed." in found["peer"][1] and "Host key verification failed." in found["other"][1]
    # An outside login is not affected: with no CA it falls back to the plain key inside the certificate.
    assert found["laptop"][0] == 0, found["laptop"]
    laptop = (tmp_path / "laptop").read_text().split()
    assert laptop == ["10.0.0.6", "ssh-ed25519", (tmp_path / "node-key").read_text().strip()], laptop


def test_certificates_are_made_once_and_again_only_when_the_node_they_name_changes(tmp_path):
    show = ('for c in "${HPCC_HOST_CERTS[@]}"; do echo "$c $(stat -c %Y.%y "$c") $(sha256sum <"$c" | cut -c1-16)"; '
            'ssh-keygen -L -f "$c" | grep -A3 Principals | tr -d " \\t" | paste -sd" " -; done\n')
    script = (f'become_node\necho "--- first"\n{show}become_node\necho "--- again"\n{show}'
              f'HPCC_IP=10.0.0.9\nbecome_node\necho "--- moved"\n{show}'
              'echo "--- drop-in"\ncat /etc/ssh/sshd_config.d/01-hpcc.conf\necho "--- known"\n'
              'cat "$HPCC_KNOWN_HOSTS"\ncut -d" " -f1,2 "$T/cluster.pub"\n')
    out = namespaced(tmp_path, script)
    assert out.returncode == 0, out.stdout + out.stderr
    parts = dict(part.split("\n", 1) for part in out.stdout.split("--- ")[1:])
    first, again, moved = ("".join(line + "\n" for line in parts[name].splitlines()
                                   if line.startswith(("/etc/ssh/", "Principals:"))) for name in ("first", "again", "moved"))
    host = subprocess.run(["uname", "-n"], capture_output=True, text=True).stdout.strip()
    certs = [line.split()[0] for line in first.splitlines()[::2]]
    assert sorted(certs) == [f"/etc/ssh/ssh_host_{t}_key-cert.pub" for t in ("ecdsa", "ed25519")], first
    assert all(line == f"Principals: compute-001 10.0.0.6 {host}" for line in first.splitlines()[1::2]), first
    assert again == first  # a rerun signs into scratch only: same files, same mtimes
    assert all(line == f"Principals: compute-001 10.0.0.9 {host}" for line in moved.splitlines()[1::2]), moved
    assert all(a != b for a, b in zip(first.splitlines()[::2], moved.splitlines()[::2]))  # each one rewritten
    drop_in = parts["drop-in"].splitlines()
    assert [line.split()[1] for line in drop_in if line.startswith("HostCertificate ")] == certs
    assert "PasswordAuthentication no" in drop_in
    known = parts["known"].splitlines()
    assert [line for line in known[:-1] if not line.startswith("#")] == [f"@cert-authority * {known[-1]}"]


@pytest.mark.parametrize("listed, named", [("port 22", "no HostKey"), ("hostkey /etc/ssh/gone_key", "/etc/ssh/gone_key")])
def test_a_node_whose_sshd_serves_no_host_key_fails_naming_it(tmp_path, listed, named):
    stand_in = f'mkdir -p "$T/bin"\nprintf "#!/bin/sh\\necho {listed}\\n" >"$T/bin/sshd"\nchmod +x "$T/bin/sshd"\n'
    out = namespaced(tmp_path, stand_in + 'PATH=$T/bin:$PATH become_node')  # what `sshd -T` lists
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"FAIL: sshd serves no host key that exists (sshd -T: {named}): there is nothing to certify" in out.stdout, out.stdout

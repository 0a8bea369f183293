"""Root's cluster key (`hpcc/<c>/ssh-key`) and the login user's key (`hpcc/<c>/user-key`), rotated by `hpcc
rotate-keys` in the same three phases as the host CA (issue 22 item 4), with Secrets Manager's own staging labels
(Secrets Manager User Guide, "Lambda rotation functions": createSecret puts AWSPENDING, finishSecret moves
AWSCURRENT, the old version keeps AWSPREVIOUS;
https://docs.aws.amazon.com/secretsmanager/latest/userguide/rotate-secrets_lambda-functions.html):
- add: the head puts a new key as AWSPENDING; every node authorizes it beside the current one;
- switch: the head moves AWSCURRENT to it (the old key becomes AWSPREVIOUS); every node logs in with the new key and
  still authorizes the old, so a node that has not switched yet is let in;
- retire: the head takes AWSPREVIOUS off; every node authorizes the new key only.
A node logs in with AWSCURRENT and authorizes every key that has a label (one outside a rotation), so a node booting
in the middle of one (a replacement) is at once in step with the others. The head moves the labels before it moves
the CA set (hpcc_node/certs.py), every step safe to repeat; the nodes follow when the certificates the head writes
them name a new phase, and say which they applied in their hostkeys object, which `hpcc rotate-keys` waits for.
ssh(1) reads an identity's public half when it starts and its private half again to sign (OpenSSH's
identity_sign: "private key ... contents do not match public" when the file changed in between), so a key file
rewritten under a launching ssh fails that login. The keys ssh offers (the client config's IdentityFile lines,
templates/steps/ssh.sh.j2) are therefore two slots, id_hpcc_a and id_hpcc_b, each rewritten only when the key it
holds has no label any more: a key keeps its slot from add to retire, and a retired key's slot is emptied.
id_hpcc and id_hpcc.pub are the current key's copies, for people (`ssh -i`) and tools.
The private keys go from the secret to the key files only, through scratch files (never a command line).
Standard library only; `aws` and `ssh-keygen` through hpcc_node.aws.Aws and an injected `run`."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
import uuid
from typing import Callable, Dict, List, NamedTuple, Optional

from hpcc_contract.names import Paths, key_comment
from hpcc_node import certstore, sshkeys
from hpcc_node.aws import Aws, AwsError, NotFound

CURRENT, PENDING, PREVIOUS = "AWSCURRENT", "AWSPENDING", "AWSPREVIOUS"
STAGES = (CURRENT, PENDING, PREVIOUS)
SLOTS = ("id_hpcc_a", "id_hpcc_b")  # the identity files ssh offers, in this order (client_config in ssh.sh.j2)
Run = sshkeys.Run


def token(secret: str, rotation_id: str) -> str:
    """The version id of a rotation's new key (PutSecretValue's ClientRequestToken, 32 to 64 characters): the same
    for a repeated add, so a head that dies and comes back puts the key once."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"hpcc:{secret}:{rotation_id}"))


def public_of(private: str, comment: str, run: Run = subprocess.run) -> str:
    """`type base64 comment` of a private key: its authorized_keys and id_hpcc.pub line."""
    return f"{sshkeys.public_of(private, run)} {comment}"


# -- the head: moves the labels --------------------------------------------------------------------------------
def versions(aws: Aws, secret: str) -> Dict[str, List[str]]:
    """version id -> its labels, of the versions that have one."""
    out = json.loads(
        aws.call("secretsmanager", "list-secret-version-ids", "--secret-id", secret, "--output", "json") or "{}"
    )
    return {
        v["VersionId"]: list(v.get("VersionStages") or []) for v in out.get("Versions", []) if v.get("VersionStages")
    }


def _move(aws: Aws, secret: str, stage: str, to: str = "", off: str = "") -> None:
    aws.call(
        "secretsmanager",
        "update-secret-version-stage",
        "--secret-id",
        secret,
        "--version-stage",
        stage,
        *(["--move-to-version-id", to] if to else []),
        *(["--remove-from-version-id", off] if off else []),
    )


def advance(aws: Aws, secret: str, phase: str, rotation_id: str, comment: str, run: Run = subprocess.run) -> str:
    """One phase of a rotation on one key secret, safe to repeat; what it did, "" for nothing. A secret with no
    key yet (no login user on the image) has nothing to rotate."""
    held = versions(aws, secret)
    current = next((v for v, s in held.items() if CURRENT in s), "")
    new = token(secret, rotation_id)
    if not current:
        return ""
    if phase == "add" and new not in held:
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "key")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(sshkeys.key_pair(comment, run)[0])
            aws.call(
                "secretsmanager",
                "put-secret-value",
                "--secret-id",
                secret,
                "--client-request-token",
                new,
                "--secret-string",
                f"file://{path}",
                "--version-stages",
                PENDING,
            )
        return f"{secret}: a new key, {PENDING}"
    if phase == "switch" and current != new and new in held:
        _move(aws, secret, CURRENT, to=new, off=current)  # Secrets Manager labels the old version AWSPREVIOUS
        if PENDING in held[new]:
            _move(aws, secret, PENDING, off=new)
        return f"{secret}: {CURRENT} is the new key, the old one {PREVIOUS}"
    if phase == "retire":
        old = [v for v, s in held.items() if PREVIOUS in s]
        for v in old:
            _move(aws, secret, PREVIOUS, off=v)
        return f"{secret}: the old key retired" if old else ""
    return ""


# -- every node: logs in with AWSCURRENT, authorizes every labelled key ----------------------------------------
class Installed(NamedTuple):
    identity: str  # fingerprint of the key it logs in with
    authorized: List[str]  # fingerprints of the cluster keys its authorized_keys lists


def staged(aws: Aws, secret: str) -> Dict[str, str]:
    """stage -> private key text, of the labels the secret has (one outside a rotation)."""
    out = {}
    for stage in STAGES:
        try:
            text = aws.call(
                "secretsmanager",
                "get-secret-value",
                "--secret-id",
                secret,
                "--version-stage",
                stage,
                "--query",
                "SecretString",
                "--output",
                "text",
            )
        except NotFound:
            continue
        if text.strip() and text.strip() != "None":
            out[stage] = text.rstrip("\n") + "\n"
    return out


def authorized_lines(existing: List[str], publics: List[str], cidr: str, comment: str, held: str = "") -> List[str]:
    """authorized_keys with the cluster's keys (comment `comment`, or the key `held` the node logged in with)
    replaced by `publics`, each accepted only from inside the VPC (`from=`, sshd(8)); other lines stay as they are."""
    blob = held.split()[1] if len(held.split()) > 1 else None
    kept = [
        line
        for line in existing
        if not line.rstrip().endswith(" " + comment) and (blob is None or blob not in line.split())
    ]
    return kept + [f'from="{cidr}" {p}' for p in publics]


def assign_slots(held: Dict[str, str], keys: List[str]) -> Dict[str, str]:
    """slot -> the private key it should hold: a key already in a slot stays there; a new one takes a slot holding
    no labelled key. `keys` in the order they are offered (AWSCURRENT first); as many as there are slots."""
    wanted = list(dict.fromkeys(k.strip() for k in keys))[: len(SLOTS)]
    out = {slot: text for slot, text in held.items() if slot in SLOTS and text.strip() in wanted}
    free = [slot for slot in SLOTS if slot not in out]
    for key in wanted:
        if key not in (t.strip() for t in out.values()):
            out[free.pop(0)] = key
    return out


def _offered(ssh: str, keys: Dict[str, str], publics: Dict[str, str], uid: int, gid: int) -> None:
    """The slots ssh offers: each labelled key in its slot (written only when the slot held another key), the
    slot of a key with no label left emptied."""
    order = [keys[s] for s in STAGES if s in keys]
    public = {keys[s].strip(): publics[s] for s in keys}
    plan = assign_slots({slot: sshkeys.read_text(os.path.join(ssh, slot)) for slot in SLOTS}, order)
    for slot in SLOTS:
        path = os.path.join(ssh, slot)
        if slot in plan:
            sshkeys.replace_file(path + ".pub", public[plan[slot].strip()] + "\n", 0o644, uid, gid)
            sshkeys.replace_file(path, plan[slot].strip() + "\n", 0o600, uid, gid)
        else:
            for stale in (path, path + ".pub"):
                if os.path.exists(stale):
                    os.unlink(stale)


def install(
    home: str, uid: int, gid: int, keys: Dict[str, str], cidr: str, comment: str, run: Run = subprocess.run
) -> Installed:
    """The slots ssh offers (every labelled key), id_hpcc and id_hpcc.pub (AWSCURRENT's copies) and
    authorized_keys (every labelled key) under HOME/.ssh."""
    ssh = os.path.join(home, ".ssh")
    os.makedirs(ssh, mode=0o700, exist_ok=True)
    publics = {stage: public_of(text, comment, run) for stage, text in keys.items()}
    trusted = list(dict.fromkeys(publics[s] for s in STAGES if s in publics))
    existing = sshkeys.read_text(os.path.join(ssh, "authorized_keys")).splitlines()
    held = sshkeys.read_text(os.path.join(ssh, "id_hpcc.pub"))
    _offered(ssh, keys, publics, uid, gid)
    sshkeys.replace_file(os.path.join(ssh, "id_hpcc"), keys[CURRENT], 0o600, uid, gid)
    sshkeys.replace_file(os.path.join(ssh, "id_hpcc.pub"), publics[CURRENT] + "\n", 0o644, uid, gid)
    lines = authorized_lines(existing, trusted, cidr, comment, held)
    sshkeys.replace_file(os.path.join(ssh, "authorized_keys"), "\n".join(lines) + "\n", 0o600, uid, gid)
    return Installed(certstore.fingerprint(publics[CURRENT]), [certstore.fingerprint(p) for p in trusted])


class Holder(NamedTuple):
    """Whose key a secret is: root's cluster key, or the login user's."""

    secret: str
    user: str


def holders(cluster: str, login_user: str) -> List[Holder]:
    paths = Paths(cluster)
    return [Holder(paths.ssh_secret, "root")] + ([Holder(paths.user_secret, login_user)] if login_user else [])


class Keys:
    """The agent's part: install the keys again when the head's certificates name a phase this node has not applied
    (and once at start). `applied` is what the node reports: "<rotation id>:<phase>" and each holder's Installed."""

    def __init__(
        self,
        aws: Aws,
        cluster: str,
        cidr: str,
        login_user: Callable[[], str],
        run: Run = subprocess.run,
        home_of: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
    ):
        self.aws, self.cluster, self.cidr, self.login_user = aws, cluster, cidr, login_user
        self.run, self.home_of = run, home_of
        self.rotation: Optional[str] = None  # the phase applied; None before the first install
        self.installed: Dict[str, Installed] = {}

    def follow(self, rotation: str) -> List[str]:
        """Install when `rotation` (the head's, in the certificates) differs from the one applied; the users whose
        keys were installed. A holder without a key file (no login key on this node) is passed over."""
        if rotation == self.rotation:
            return []
        done, comment = [], key_comment(self.cluster)
        for h in holders(self.cluster, self.login_user()):
            try:
                who = self.home_of(h.user)
            except KeyError:
                continue
            if h.user != "root" and not os.path.exists(os.path.join(who.pw_dir, ".ssh", "id_hpcc")):
                continue  # the bootstrap installed no login key here (a system account, no such user)
            keys = staged(self.aws, h.secret)
            if CURRENT not in keys:
                continue
            self.installed[h.user] = install(who.pw_dir, who.pw_uid, who.pw_gid, keys, self.cidr, comment, self.run)
            done.append(h.user)
        self.rotation = rotation
        return done


def main(argv: List[str]) -> int:
    """`python3 -m hpcc_node.cluster_keys CLUSTER VPC_CIDR [LOGIN_USER]`: the bootstrap's ssh step, after the
    keys exist: what the agent installs, once (a node booting during a rotation authorizes both keys at once)."""
    if len(argv) not in (3, 4):
        print(main.__doc__, file=sys.stderr)
        return 2
    keys = Keys(Aws(), argv[1], argv[2], lambda: argv[3] if len(argv) == 4 else "")
    try:
        print(" ".join(keys.follow("boot")) or "no keys")
    except (AwsError, RuntimeError, OSError, ValueError) as e:
        print(f"cluster keys: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

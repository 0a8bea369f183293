"""`hpcc rotate-keys --cluster C`: a new host CA, and new SSH keys for root and the login user, on a running
cluster, without breaking a running job's SSH.

The command steps `/hpcc/<c>/rotation` through three phases (hpcc_node/certs.py applies them on the head; every
node's agent installs what the head wrote), and waits between phases until every node has applied the phase:
- add: the head makes a new CA; every node trusts both (two `@cert-authority` lines); certificates stay the old CA's;
- switch: the head signs every node's host keys with the new CA; both are still trusted, so a connection from a node
  that has not yet seen the new certificates, or to one still serving the old, is accepted;
- retire: the old CA is dropped from the secret and from every known-hosts file.
Root's cluster key and the login user's key move in the same phases (hpcc_node/cluster_keys.py): a new key
authorized beside the old (add), logged in with (switch), the old one no longer authorized (retire).
A node applied a phase when the certificates the head wrote for it (certs/<node>.json in the state bucket) are of the
phase and the node's own report (hostkeys/<instance-arn>.json: the CAs it trusts, the CA of the certificates it
serves) says it installed them; the nodes are those of the controller's membership.json (hpcc_node/certstore.py).
Open SSH sessions are never touched (their host key was checked at connect); new ones succeed through every phase.

One rotation at a time: a rotation whose retire not every node has applied is still running; the command refuses to
start another and `--resume` carries it on (re-running a phase changes nothing). The rotation parameter is Pulumi's
(created "none", so `pulumi destroy` removes it); two operators starting a rotation in the same second are not
told apart (SSM has no conditional write): the second one's id wins, and both wait for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from hpcc_contract.names import MEMBERSHIP_KEY, NO_ROTATION, Paths, certs_key, hostkeys_key
from hpcc_node import certstore
from hpcc_node.certs import members
from hpcc_node.controller import membership
from infra.ops import OpsError, store
from infra.ops.aws import Aws

Clock = Callable[[], float]


def applied(phase: str, issued: certstore.Issued | None, published: certstore.Published | None) -> bool:
    """Whether a node has applied a phase: the head's certificates for it are of the phase, and the node says it
    trusts exactly those CAs, serves certificates by the one that signs, and installed the cluster keys of the phase
    (both keys authorized until retire, one after)."""
    if issued is None or published is None:
        return False
    trusted = [certstore.fingerprint(ca) for ca in issued.cas]
    of_phase = {
        "add": len(trusted) == 2 and issued.ca == trusted[0],
        "switch": len(trusted) == 2 and issued.ca == trusted[1],
        "retire": len(trusted) == 1 and issued.ca == trusted[0],
    }[phase]
    keys = published.login_keys == issued.rotation and all(
        n == (1 if phase == "retire" else 2) for n in published.authorized.values()
    )
    return (
        of_phase
        and keys
        and published.trust == trusted
        and published.cert_ca == issued.ca
        and published.ip == issued.ip
    )


def _parameters(aws: Aws, names: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for i in range(0, len(names), 10):  # GetParameters takes at most 10 names
        for p in aws.call("ssm", "get_parameters", Names=names[i : i + 10]).get("Parameters", []):
            found[p["Name"]] = p["Value"]
    return found


class Cluster:
    """The state bucket and the members' instance ARNs, read once a poll."""

    def __init__(self, aws: Aws, cluster: str):
        self.aws, self.cluster, self.bucket = aws, cluster, store.names(aws, cluster).bucket
        caller = aws.call("sts", "get_caller_identity")
        self.partition, self.account = caller["Arn"].split(":")[1], caller["Account"]

    def nodes(self) -> dict[str, str]:
        """name -> instance ARN of the head and every listed node (membership.json)."""
        doc = store.read_membership(self.aws, self.bucket)
        if not doc.get("head"):
            raise OpsError(
                f"no membership.json in s3://{self.bucket}: is {self.cluster!r} a running cluster in this "
                "region, with its controller up?"
            )
        try:
            listed = members(doc)  # the head's own list: the nodes it signs for
        except ValueError as e:
            raise OpsError(f"s3://{self.bucket}/{MEMBERSHIP_KEY}: {e}") from None
        return {
            m.name: membership.instance_arn(self.partition, self.aws.region, self.account, m.instance)
            for m in listed
            if m.instance
        }

    def read(self, key: str) -> str | None:
        return certstore.get(self.aws.client("s3"), self.bucket, key)[0]


def lagging(c: Cluster, phase: str) -> tuple[list[str], int]:
    """The nodes that have not applied the phase yet, and how many nodes there are."""
    nodes = c.nodes()

    def check(item: tuple[str, str]) -> bool:
        node, arn = item
        return applied(
            phase, certstore.read_issued(c.read(certs_key(node))), certstore.read_published(c.read(hostkeys_key(arn)))
        )

    with ThreadPoolExecutor(store.FETCH_THREADS) as pool:
        done = list(pool.map(check, nodes.items()))
    return [n for n, ok in zip(nodes, done, strict=True) if not ok], len(nodes)


def current(aws: Aws, cluster: str) -> certstore.Rotation | None:
    name = Paths(cluster).rotation
    try:
        return certstore.read_rotation(_parameters(aws, [name]).get(name))
    except ValueError as e:
        raise OpsError(
            f"{name}: {e}; reset it (aws ssm put-parameter --overwrite --name {name} --value {NO_ROTATION}) to "
            "start again"
        ) from None


def put(aws: Aws, cluster: str, rotation: certstore.Rotation) -> None:
    aws.call(
        "ssm",
        "put_parameter",
        Name=Paths(cluster).rotation,
        Type="String",
        Value=certstore.rotation_text(rotation),
        Overwrite=True,
    )


def wait_phase(
    c: Cluster,
    phase: str,
    timeout: float,
    say: Callable[[str], None],
    clock: Clock = time.time,
    sleep: Callable[[float], None] = time.sleep,
    poll: float = 15,
) -> None:
    deadline, last = clock() + timeout, None
    while True:
        behind, total = lagging(c, phase)
        line = f"{phase}: {total - len(behind)}/{total} nodes applied" + (
            f" (waiting for {', '.join(behind[:8])}{' ...' if len(behind) > 8 else ''})" if behind else ""
        )
        if line != last:
            say(line)
            last = line
        if not behind:
            return
        if clock() >= deadline:
            raise OpsError(
                f"phase {phase}: {', '.join(behind[:20])} did not apply it within {timeout / 60:.0f} min "
                "(check `hpcc status` and the nodes' log); nothing is broken: both CAs and both keys are "
                "trusted until "
                "retire. Run `hpcc rotate-keys --resume` to carry on"
            )
        sleep(poll)


def rotate(
    aws: Aws,
    cluster: str,
    resume: bool,
    timeout: float,
    say: Callable[[str], None],
    clock: Clock = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Run (or with resume, carry on) one rotation to its end; returns its id."""
    c = Cluster(aws, cluster)
    running = current(aws, cluster)
    if running and running.phase == "retire" and not lagging(c, "retire")[0]:
        running = None  # the last rotation is over
    if running and not resume:
        raise OpsError(
            f"rotation {running.id} is still at phase {running.phase}: run `hpcc rotate-keys --cluster "
            f"{cluster} --resume` to carry it on; one rotation at a time"
        )
    if running is None and resume:
        say("no rotation is running: nothing to resume")
        return ""
    if running is None:
        running = certstore.Rotation(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock())), "add")
        put(aws, cluster, running)
        say(f"rotation {running.id} started")
    for phase in certstore.PHASES[certstore.PHASES.index(running.phase) :]:
        if phase != running.phase:
            running = certstore.Rotation(running.id, phase)
            put(aws, cluster, running)
        wait_phase(c, phase, timeout, say, clock, sleep)
    say(
        f"rotation {running.id} done: every node trusts and serves the new host CA only, and logs in with and "
        "accepts the new cluster keys only"
    )
    return running.id

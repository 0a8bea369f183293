"""The bootstrap's side of the host certificates (templates/steps/ssh.sh.j2 and join.sh.j2), before the agent runs:

  python3 -m hpcc_node.certs_boot head CLUSTER INSTANCE IP...
                                                          the head: its CA (made at the first boot), its own
                                                          certificates, and whatever the compute nodes published
  python3 -m hpcc_node.certs_boot node CLUSTER NODE IP DEADLINE INSTANCE
                                                          a compute node: publish its host keys, wait (until the
                                                          epoch DEADLINE) for the head to sign them, install
  python3 -m hpcc_node.certs_boot sign CLUSTER IP...      the head's join step: sign what was published since

IP...: the hosts list, head first. `head` and `node` print the certificate paths sshd is to present, one a line.
Exit 3: the head has not signed by DEADLINE; 1: any other error, said on stderr."""

from __future__ import annotations

import random
import sys
import time
from typing import Callable, List

from hpcc_node import certs, certstore
from hpcc_node.aws import Aws, AwsError


def wait_for_certificates(node: certs.Node, deadline: float, clock: Callable[[], float] = time.time,
                          sleep: Callable[[float], None] = time.sleep) -> List[str]:
    """Publish, then poll the node's certs parameter until it holds certificates for its address and host keys."""
    node.publish()
    name = node.names.certs(node.node)
    while True:
        issued = certstore.read_issued(node.aws.get_parameters([name]).get(name, (0, ""))[1])
        if issued and issued.ip == node.ip:
            paths, _ = node.install(issued)
            if paths:
                node.publish()
                return paths
        if clock() >= deadline:
            raise TimeoutError(f"the head has not signed this node's host keys ({name} "
                               f"{'holds another address' if issued else 'is empty'}): see the head's status and log")
        sleep(5 + random.random() * 5)


def main(argv: List[str]) -> int:
    aws = Aws()
    try:
        command, cluster, rest = argv[1], argv[2], argv[3:]
        if command == "head":
            instance, hosts = rest[0], rest[1:]
            head, me = certs.Head(aws, cluster), certs.Node(aws, cluster, "head", hosts[0], instance=instance)
            me.publish()
            head.sign_pending(hosts, time.time())
            paths, _ = me.install(head.issued["head"]) if head.issued.get("head") else ([], False)
            me.publish()
            print("\n".join(paths))
            return 0 if paths else 1
        if command == "node":
            node, ip, deadline, instance = rest[0], rest[1], float(rest[2]), rest[3]
            print("\n".join(wait_for_certificates(certs.Node(aws, cluster, node, ip, instance=instance), deadline)))
            return 0
        if command == "sign":
            signed = certs.Head(aws, cluster).sign_pending(rest, time.time())
            print(f"signed host certificates for {', '.join(signed) or 'no node'}", file=sys.stderr)
            return 0
    except TimeoutError as e:
        print(f"host certificates: {e}", file=sys.stderr)
        return 3
    except (AwsError, RuntimeError, ValueError, OSError, IndexError) as e:
        print(f"host certificates: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The bootstrap's side of the host certificates (templates/steps/ssh.sh.j2), before the agent runs:

  python3 -m hpcc_node.certs_boot head CLUSTER BUCKET STATUS_KEY IP
                                          the head: its CA (made at the first boot) and its own certificates
  python3 -m hpcc_node.certs_boot node CLUSTER BUCKET STATUS_KEY NODE IP DEADLINE
                                          a compute node: publish its host keys, wait (until the epoch DEADLINE) for
                                          the head's agent to sign them, install

BUCKET: the state bucket; STATUS_KEY: status/<this instance's ARN>.json (its ARN names where it publishes). Both print
the certificate paths sshd is to present, one a line. Exit 3: the head has not signed by DEADLINE; 1: any other
error, said on stderr."""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Callable, List

from hpcc_contract.names import STATUS_PREFIX, certs_key
from hpcc_node import awscli, certs, s3rest
from hpcc_node.aws import Aws, AwsError
from hpcc_node.controller import membership


def instance_arn(status_key: str) -> str:
    """The ARN in status/<arn>.json (membership.status_key's inverse); ValueError for anything else."""
    if not membership.key_instance(status_key):
        raise ValueError(f"{status_key[:120]!r} is not status/<instance ARN>.json")
    return status_key[len(STATUS_PREFIX) : -len(".json")]


# S3's answers that no retry changes (a role without the permission, a bucket that is not there): fail now.
PERMANENT = {"AccessDenied", "NoSuchBucket", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}


def wait_for_certificates(
    node: certs.Node,
    deadline: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> List[str]:
    """Publish, then poll the node's certs object until it holds certificates for its address and host keys. A
    transient S3 error (a timeout, throttling, a 5xx) is tried again until the deadline; one of PERMANENT fails."""
    key = certs_key(node.node)
    published, issued, last_error = False, None, ""
    while True:
        try:
            if not published:
                node.publish()
                published = True
            issued = node.fetch()
            if issued and issued.ip == node.ip:
                paths, _ = node.install(issued)
                if paths:
                    node.publish()
                    return paths
        except (AwsError, awscli.ClientError) as e:
            if awscli.error_code(e) in PERMANENT:
                raise
            last_error = f"; the last S3 error: {e}"[:300]
        if clock() >= deadline:
            raise TimeoutError(
                f"the head has not signed this node's host keys (s3://{node.bucket}/{key} "
                f"{'holds another address' if issued else 'is absent or unreadable'}): see the head's "
                f"status and its agent's log{last_error}"
            )
        sleep(5 + random.random() * 5)


def main(argv: List[str]) -> int:
    aws, s3 = Aws(), s3rest.client(os.environ)  # the wait polls S3 every 5-10 s: in process, not the CLI
    try:
        command, cluster, bucket, arn, rest = argv[1], argv[2], argv[3], instance_arn(argv[4]), argv[5:]
        if command == "head":
            ip = rest[0]
            head = certs.Head(aws, s3, bucket, cluster, arn.rsplit("/", 1)[0] + "/")
            me = certs.Node(s3, bucket, cluster, "head", ip, arn)
            me.publish()
            head.sign_pending([certs.Member("head", ip, me.instance)], time.time())
            paths, _ = me.install(head.issued["head"]) if head.issued.get("head") else ([], False)
            me.publish()
            print("\n".join(paths))
            return 0 if paths else 1
        if command == "node":
            node, ip, deadline = rest[0], rest[1], float(rest[2])
            print("\n".join(wait_for_certificates(certs.Node(s3, bucket, cluster, node, ip, arn), deadline)))
            return 0
    except TimeoutError as e:
        print(f"host certificates: {e}", file=sys.stderr)
        return 3
    except (AwsError, awscli.ClientError, RuntimeError, ValueError, OSError, IndexError) as e:
        print(f"host certificates: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

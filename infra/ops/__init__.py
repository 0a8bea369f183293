"""Operator commands, usable as a library: preflight, status, hostfile, reap, up/destroy.

boto3 only; each module takes an `infra.ops.aws.Aws` (clients with backoff on describe calls), so the
same code runs against a real region and against the embedded moto AWS (`--emulate`, tests).
"""


class OpsError(Exception):
    """Something an operator must fix: printed as a message, never a traceback."""

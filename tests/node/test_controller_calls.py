"""One log line per controller loop with its phases' seconds and its calls per API (hpcc_node/controller/calls.py,
loop.py; issue 38): counted through the clients themselves, so a call the code adds is counted without anyone
listing it."""

from __future__ import annotations

import logging

import pytest

from hpcc_node.controller.calls import Costs, Counted, counted_command
from hpcc_node.controller.loop import build_step, forever
from tests.node.test_controller_restart import BUCKET, CLUSTER, GPU, TABLE, fresh_env


class Paginator:
    def paginate(self, **params):
        yield from ({"page": n} for n in range(3))
        if params.get("Fail"):
            raise RuntimeError("RequestLimitExceeded")


class Client:
    region = "us-east-1"

    def get_paginator(self, operation):
        return Paginator()

    def describe_tags(self, **params):
        return {"Tags": []}

    def put_object(self, **params):
        raise RuntimeError("SlowDown")


def test_every_operation_and_every_page_is_one_call_failed_or_not_and_the_slowest_is_kept():
    now = [0.0]
    costs = Costs(lambda: now[0])
    ec2 = Counted(Client(), "ec2", costs)
    assert ec2.describe_tags(Filters=[]) == {"Tags": []} and ec2.region == "us-east-1"
    assert [p["page"] for p in ec2.get_paginator("describe_instances").paginate(Filters=[])] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="RequestLimitExceeded"):
        list(ec2.get_paginator("describe_instances").paginate(Fail=True))
    with pytest.raises(RuntimeError, match="SlowDown"):
        Counted(Client(), "s3", costs).put_object(Bucket="b", Key="k", Body=b"")

    def hung_scontrol(argv):  # a command that answers after a minute
        now[0] += 60.5
        return "ok"

    assert counted_command(hung_scontrol, costs)(["scontrol", "update", "NodeName=a-000"]) == "ok"
    assert costs.calls == {"ec2.describe_tags": 1, "ec2.describe_instances": 7, "s3.put_object": 1, "scontrol": 1}
    assert costs.slowest == ("scontrol", 60.5) and "; 10 calls, the slowest scontrol 60.5 s: " in costs.line(1, 61)


def test_the_line_gives_the_phases_in_order_and_the_busiest_calls_first():
    now = [0.0]
    costs = Costs(lambda: now[0])
    for name, seconds in (("lease", 0.2), ("observe", 2.1), ("decide", 0.01), ("act", 1.1)):
        with costs.phase(name):
            now[0] += seconds
    costs.calls.update({"s3.get_object": 2, "ec2.describe_instances": 1, "dynamodb.scan": 2})
    assert costs.line(12, 3.4) == (
        "loop 12: 3.4 s (lease 0.2, observe 2.1, decide 0.0, act 1.1); "
        "5 calls: dynamodb.scan 2, s3.get_object 2, ec2.describe_instances 1"
    )  # (calls counted by hand here: no slowest to name)
    costs.reset()
    assert costs.line(13, 0.5) == "loop 13: 0.5 s; 0 calls"


def test_a_built_controller_logs_each_loops_phases_and_calls_then_counts_afresh(caplog):
    caplog.set_level(logging.INFO, logger="hpcc.controller")
    with fresh_env() as env:
        step = build_step(env.ec2, env.ddb, env.s3, CLUSTER, TABLE, BUCKET, lambda: [GPU], "head-1", env.clock)
        loops = []

        def one_loop():
            loops.append(dict(step.costs.calls))
            result = step()
            loops[-1] = dict(step.costs.calls)  # what this loop called, before forever's line resets it
            return result

        one_loop.costs = step.costs
        forever(one_loop, env.clock, lambda s: env.now.__setitem__(0, env.now[0] + s), stop=lambda: len(loops) >= 2)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loop ")]
    assert [line.split(":")[0] for line in lines] == ["loop 1", "loop 2"]
    assert "(lease " in lines[0] and ", observe " in lines[0] and ", act " in lines[0]
    # the first loop launches the group (the ledger written, EC2 asked), every loop reads the ledger and EC2
    assert loops[0].get("dynamodb.scan", 0) >= 1 and loops[0].get("ec2.create_fleet", 0) >= 1, loops[0]
    assert loops[1].get("ec2.describe_instances", 0) >= 1 and "ec2.create_fleet" not in loops[1], loops[1]
    assert f"{sum(loops[0].values())} calls, the slowest " in lines[0]

"""The cluster's size limits and its node groups' name rules: facts the config's model and its rules both read
(infra/config/), kept below them so neither imports the other for them."""

from __future__ import annotations

import re

from hpcc_contract.hosts import GROUP_NAME as GROUP_NAME_PATTERN
from hpcc_contract.names import HEAD

# The most compute nodes a cluster holds, across its groups: what bounds it is in the README ("4,096 nodes").
MAX_NODES = 4096
# A group's name starts its nodes' names (`<group>-NNN`), Slurm's node ranges and partitions, and Pulumi names: the
# nodes' own rule for it (hpcc_contract/hosts.py).
GROUP_NAME = re.compile(GROUP_NAME_PATTERN)
RESERVED_GROUP_NAMES = (HEAD,)  # the head's node name
LEGACY_GROUP = "compute"  # what `compute:` means: one group of this name (hpcc_contract/names.py compute_node_name)
MAX_GROUPS = 16  # each group is an entry of /hpcc/<c>/groups, whose 8 KB hold 16 (infra/render/groups_param.py)

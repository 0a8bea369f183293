"""The node agent's version (reported in each node's status as agentVersion) and its protocol with the other
nodes' agents: the status fields they read of each other. During a rollout both the current protocol and the one
before it are read (a status without `protocol` is the bash agent's, 0)."""

AGENT_VERSION = "1"
PROTOCOL = 1
ACCEPTED_PROTOCOLS = (PROTOCOL - 1, PROTOCOL)

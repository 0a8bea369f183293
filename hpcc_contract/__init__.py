"""The contract at the bottom of the house: what the program, the operator's commands and the nodes share, defined
once. Names and tags (`names.py`), the settings text (`settings.py`), the hosts text (`hosts.py`), the hostfile
formats (`hostfile.py`), the failure taxonomy (`taxonomy.py`), the agent's version (`version.py`) and the node
groups' JSON (`groups.py`).

Standard library only, and Python 3.8's: the bundle ships this package whole beside `hpcc_node/` (the nodes run it on
their own Python), and everything else imports it instead of spelling its facts again. It imports nothing of the
project but itself (tests/test_architecture.py)."""

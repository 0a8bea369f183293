"""What runs on the nodes: the membership agent, the head's controller and the health checks, and what they share.

Standard library only, Python >= 3.8 (the images span Ubuntu 22.04/24.04 and Amazon Linux 2023). It ships in the
cluster's bundle beside the contract (`hpcc_contract/`), the one other package it may import; never the Pulumi
program or the operator's commands (`infra/`).
"""

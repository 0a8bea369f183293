"""Container images on the nodes (issue 35): the cluster-wide squashfs cache on the shared file system, imported once
per image by the first node that needs it while the others wait (cache.py, locks.py), and its command line
(`python3 -m hpcc_node.containers ensure|evict|list`). The layout and the documents are the contract's
(hpcc_contract/containers.py)."""

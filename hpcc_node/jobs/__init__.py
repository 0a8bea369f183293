"""Programs hpcc runs as jobs on the nodes under the image's PyTorch (torchrun), not the node's own Python: unlike the
rest of hpcc_node they may import torch. Each runs by path from the bundle (/opt/hpcc/current/hpcc_node/jobs/)."""

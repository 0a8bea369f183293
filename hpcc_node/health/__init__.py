"""Health checks: parsers of the real tools' outputs, the Xid catalog, the check runner and the node's verdict.

Pure parsing and deciding; the tools, the kernel log, the clock and the file system are handed in, so the same
code runs under the node agent, Slurm's HealthCheckProgram, the Prolog/Epilog and the tests.
"""

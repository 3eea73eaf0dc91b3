"""The burst-taint controller: puts the NoSchedule burst taint on the virtual node while in-cluster GPUs are free.

See README.md in this directory for the rules, the queries and the metrics.
"""

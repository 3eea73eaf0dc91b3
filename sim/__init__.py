"""The simulated GPU cluster's Python: fake nodes, the local Kueue config, the stack's daemons as local processes,
the flip and its timeline. Each module also runs as a script (``python sim/<module>.py``); see sim/README.md.
"""

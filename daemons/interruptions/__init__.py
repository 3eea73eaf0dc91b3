"""Interruption accounting for training JobSets (``gpucluster-interruptions``): causes, ledger, ETTR, bound."""

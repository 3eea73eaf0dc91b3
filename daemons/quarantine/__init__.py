"""The quarantine controller: a GPU node whose alerts fire gets the NoExecute quarantine taint (training leaves,
inference stays), within a circuit breaker per flavor, and is listed in one ledger an operator reads."""

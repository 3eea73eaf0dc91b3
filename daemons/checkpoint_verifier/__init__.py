"""The checkpoint verifier: whether a checkpoint a job reported is complete, judged by a reader other than the job.

``dcp.py`` reads PyTorch Distributed Checkpoint's ``.metadata`` without torch and without running the pickle;
``verify.py`` is the pure verdict on one checkpoint directory (``contract/checkpoints.py``'s layout); ``files.py``
reads a directory into what the verdict needs; ``check.py`` is the command the verifier's pod runs.
"""

"""Make-before-break room for training gangs: a Kueue AdmissionCheck that moves inference off first.

``plan`` chooses the nodes a gang needs and the replicas to move off them; ``decide`` is the state machine that
turns one observation (``model``) into the next actions. Both are pure. See README.md in this directory.
"""

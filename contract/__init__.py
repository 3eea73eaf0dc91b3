"""The contract between what the stack deploys and what runs: pure data, read by both sides.

The settings models and their base (``model``, ``issues``, ``documents``), the constants, each controller's spec
and least-privilege rules (``controllers/<name>.py``, on ``spec`` and ``rbac``), and the registry listing the
controllers once (``registry``). Nothing here imports Pulumi, the Kubernetes client or any module of
``components/`` or ``daemons/``; both of those import this package and never each other
(``tests/test_layers.py`` follows every import transitively).
"""

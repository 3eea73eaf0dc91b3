"""How dcgm-exporter names the node a GPU is on, in every release a cluster may run.

dcgm-exporter writes the node's name on each GPU series as ``Hostname`` up to its newest release (4.5.3-4.8.2);
its main branch writes ``hostname`` (NVIDIA/dcgm-exporter#655, in ``internal/pkg/rendermetrics``, not released
yet). A rule that reads only one of them matches nothing on the other: the temperature alert, the XID alerts, the
stall detector and the dashboard would go quiet on the first upgrade, with every panel still green. So every
expression of ours reads the node through these functions, which accept either spelling.
"""

from __future__ import annotations

#: dcgm-exporter's label for the node: the released spelling first, then the one its next release writes.
HOST_LABELS = ("Hostname", "hostname")


def with_node(expr: str) -> str:
    """``expr`` (dcgm-exporter series) with the node copied into ``node`` from whichever host label it carries.

    ``label_replace`` leaves a series alone where the source label is empty, so applying it once per spelling
    copies the one that is there."""
    for label in HOST_LABELS:
        expr = f'label_replace({expr}, "node", "$1", "{label}", "(.+)")'
    return expr


def on_either_host(template: str) -> str:
    """``template`` once per host label (its ``{host}`` replaced by the label), joined with ``or``.

    For a selector on the node, such as ``DCGM_FI_DEV_GPU_TEMP{{{host}=~"$node"}}``: a series carries one spelling,
    so it is matched once; where a matcher also accepts the empty value, ``or`` drops the second copy of each
    series."""
    return "(" + " or ".join(template.format(host=label) for label in HOST_LABELS) + ")"

"""sim/summary.py: the real node and the image digest each of its pods runs, from live objects."""

from __future__ import annotations

from tests.support.sim import load_sim_module

summary = load_sim_module("summary")


def test_each_pod_of_the_real_node_is_listed_with_the_digest_it_runs() -> None:
    node = {
        "metadata": {"name": "100.127.0.1"},
        "status": {
            "nodeInfo": {"kubeletVersion": "v1.36.3", "containerRuntimeVersion": "containerd://1.6.20"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    digest = "ghcr.io/example/gpucluster-daemons@sha256:" + "a" * 64
    pods = [
        {
            "metadata": {"namespace": "gpucluster-training", "name": "sd-1"},
            "spec": {"nodeName": "100.127.0.1"},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"image": "ghcr.io/example/gpucluster-daemons:0.1.0", "imageID": digest}],
            },
        },
        {"metadata": {"namespace": "team-a", "name": "on-kwok"}, "spec": {"nodeName": "h100-node-0"}, "status": {}},
    ]
    assert summary.real_pods([node], pods) == [
        "node      100.127.0.1 (real: kubelet v1.36.3, containerd://1.6.20); Ready=True",
        f"pod       gpucluster-training/sd-1 on 100.127.0.1: Running, Ready=True; {digest}",
    ]

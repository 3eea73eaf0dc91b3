"""gpucluster: the Pulumi program. Validate the whole stack config, then build one GpuCluster.

Environment (both optional, used by `make policy` and `make render`):
  GPUCLUSTER_RENDER_DIR      render every manifest to this directory instead of applying it to a cluster
                             (the Kubernetes provider's renderYamlToDirectory mode: no kubeconfig needed)
  GPUCLUSTER_OFFLINE_CHARTS  read registry charts from the Go modules that carry them (components/charts.py)
"""

import os

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import StackConfigError, from_pulumi_config

try:
    config = from_pulumi_config()
except StackConfigError as err:
    # Nothing has been registered yet: report every problem and stop cleanly, without a traceback.
    for issue in err.issues:
        pulumi.log.error(str(issue))
    raise pulumi.RunError(f"{err.source}: {len(err.issues)} config problem(s); nothing was changed") from None

opts = None
render_dir = os.environ.get("GPUCLUSTER_RENDER_DIR")
if render_dir:
    renderer = k8s.Provider("render", render_yaml_to_directory=render_dir)
    opts = pulumi.ResourceOptions(providers={"kubernetes": renderer})

cluster = GpuCluster(config.cluster_name, GpuClusterArgs(config=config), opts=opts)
for key, value in cluster.outputs.items():
    pulumi.export(key, value)

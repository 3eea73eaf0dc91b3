"""gpucluster: the Pulumi program. Validate the whole stack config, then build one GpuCluster.

GPUCLUSTER_OFFLINE_CHARTS (optional, used by `make policy` and `make render CHARTS=gomodule`) reads registry
charts from the Go modules that carry them (components/charts.py).

Before any resource, the cluster is checked for the add-ons the stack needs (components/preflight.py): a cluster
lacking one is refused, naming it.
"""

import pulumi

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import StackConfigError, from_pulumi_config

try:
    config = from_pulumi_config()
except StackConfigError as err:
    # Nothing has been registered yet: report every problem and stop cleanly, without a traceback.
    for issue in err.issues:
        pulumi.log.error(str(issue))
    raise pulumi.RunError(f"{err.source}: {len(err.issues)} config problem(s); nothing was changed") from None

kubernetes = pulumi.Config("kubernetes")
if config.prerequisites.check and not kubernetes.get("renderYamlToDirectory"):
    from components.preflight import ClusterUnreadableError, api_client, check

    try:
        lacking = check(config, api_client(kubernetes.get("kubeconfig"), kubernetes.get("context")))
    except ClusterUnreadableError as err:
        pulumi.log.warn(f"cluster prerequisites not checked: {err}")
    else:
        if lacking:
            for problem in lacking:
                pulumi.log.error(problem)
            raise pulumi.RunError(
                f"the cluster lacks {len(lacking)} prerequisite(s) of this stack; nothing was changed "
                "(gpucluster:prerequisites.check: false skips this check)"
            )

cluster = GpuCluster(config.cluster_name, GpuClusterArgs(config=config))
for key, value in cluster.outputs.items():
    pulumi.export(key, value)

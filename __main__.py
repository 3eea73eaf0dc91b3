"""gpucluster: the Pulumi program. Validate the whole stack config, then build one GpuCluster.

GPUCLUSTER_OFFLINE_CHARTS (optional, used by `make policy` and `make render CHARTS=gomodule`) reads registry
charts from the Go modules that carry them (components/charts.py).

The local stack (`kueue.localWebhooks` set) runs Kueue and JobSet outside the simulated cluster: a stack transform
from sim/local_webhooks.py points the charts' webhook objects at them. No other stack registers a transform.
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

if config.kueue.local_webhooks is not None:
    from sim import local_webhooks

    jobset = config.jobset
    others = {jobset.namespace: jobset.local_webhooks} if jobset.enabled and jobset.local_webhooks else None
    local_webhooks.register(config.kueue.local_webhooks, others)

cluster = GpuCluster(config.cluster_name, GpuClusterArgs(config=config))
for key, value in cluster.outputs.items():
    pulumi.export(key, value)

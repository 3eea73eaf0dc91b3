"""InfiniBand (sysfs) and NVLink (NVML) exporter for GPU nodes.

Every metric is prefixed ``gpucluster_fabric_``. Collectors are independent: one that fails reports
``gpucluster_fabric_collector_success{collector="..."} 0`` and the rest of the scrape is still served.
"""

from contract.fabric_settings import METRICS_PREFIX as METRIC_PREFIX

__all__ = ["METRIC_PREFIX"]

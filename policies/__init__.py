"""The gpucluster CrossGuard policy pack: one module per concern, all mandatory by default except the advisory
ones listed in :data:`ADVISORY` (they say what a choice costs; they refuse nothing)."""

from __future__ import annotations

from pulumi_policy import Policy

from policies.burst_settings import provider_secrets_not_in_config
from policies.capacity import flavors_select_accepted_nodes, quota_controller_where_queues_are
from policies.confidential_env import confidential_env_stays_in_our_clusters
from policies.descheduler import descheduler_bounded
from policies.fabric import training_jobs_use_the_fabric
from policies.images import images_pinned, prod_images_by_digest
from policies.inference import inference_gpu_deployments_burstable, inference_gpu_deployments_have_pdb
from policies.kueue_api import kueue_objects_are_v1beta2
from policies.make_before_break import (
    inference_deployments_make_before_break,
    training_queues_carry_make_before_break,
    training_queues_make_before_break_off,
)
from policies.priorities import training_above_inference, workload_priorities_ordered
from policies.quarantine import training_never_tolerates_quarantine
from policies.quota import quota_within_capacity
from policies.rbac import virtual_node_least_privilege
from policies.secrets import no_secrets_in_clear
from policies.security import gpus_requested_and_confinement_on, no_privileged_or_host_path
from policies.storage import checkpoint_claims_rwx
from policies.taints import burst_taint_never_noexecute
from policies.telemetry import dcgm_counters_complete

ALL_POLICIES: list[Policy] = [
    training_above_inference,
    workload_priorities_ordered,
    burst_taint_never_noexecute,
    descheduler_bounded,
    quota_within_capacity,
    checkpoint_claims_rwx,
    images_pinned,
    prod_images_by_digest,
    no_privileged_or_host_path,
    gpus_requested_and_confinement_on,
    no_secrets_in_clear,
    dcgm_counters_complete,
    inference_gpu_deployments_burstable,
    inference_gpu_deployments_have_pdb,
    virtual_node_least_privilege,
    provider_secrets_not_in_config,
    confidential_env_stays_in_our_clusters,
    inference_deployments_make_before_break,
    training_queues_carry_make_before_break,
    training_queues_make_before_break_off,
    training_never_tolerates_quarantine,
    quota_controller_where_queues_are,
    flavors_select_accepted_nodes,
    training_jobs_use_the_fabric,
    kueue_objects_are_v1beta2,
]

#: The policies that only advise: what a stack's choice costs, never a refusal.
ADVISORY: frozenset[str] = frozenset({training_queues_make_before_break_off.name, flavors_select_accepted_nodes.name})

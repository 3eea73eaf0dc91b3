"""What a controller of ours may write: each rule matched to one controller's ServiceAccount user, bounding its
writes to the fields it owns (RBAC says which objects; these say which fields of them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from components.guardrails_policies.model import (
    JOBSETS,
    GuardrailInputs,
    Policy,
    Validation,
    cel,
    label,
)
from contract.bounds import Bound, JobSetAnnotationOnly
from contract.constants import (
    BURST_ENDPOINTS_MANAGER,
    BURST_POD_ANNOTATIONS,
    ENDPOINT_SLICE_MANAGED_BY_LABEL,
    KUEUE_GROUP,
    KUEUE_VERSION,
)
from contract.registry import CONTROLLERS, INTERRUPTIONS, QUOTA_CONTROLLER

NODE_UPDATES = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"], "operations": ["UPDATE"]}
#: A Node's spec fields besides its taints (``configSource`` is long deprecated and still a field).
NODE_SPEC_FIELDS = ("podCIDR", "podCIDRs", "providerID", "unschedulable", "configSource")

#: What every write rule's message adds: the metadata no controller of ours may touch.
KEEPS = "; labels, owners (ownerReferences) and finalizers stay as they were"


def map_unchanged_but(obj: str, old: str, keys: Sequence[str]) -> str:
    """CEL: the map ``obj`` holds what ``old`` held, key for key and value for value, except ``keys``."""
    allowed = cel(list(keys))
    return (
        f"(!has({obj}) || {obj}.all(k, k in {allowed} || (has({old}) && k in {old} && {old}[k] == {obj}[k])))"
        f" && (!has({old}) || {old}.all(k, k in {allowed} || (has({obj}) && k in {obj})))"
    )


def field_unchanged(obj: str, old: str) -> str:
    """CEL: the optional field is absent in both, or present in both and equal."""
    return f"(has({obj}) == has({old}) && (!has({obj}) || {obj} == {old}))"


def node_marks(
    name: str,
    who: str,
    user: str,
    *,
    taint: tuple[str, str],
    labels: Sequence[str],
    annotations: Sequence[str],
    only_on: tuple[str, ...] = (),
) -> Policy:
    """A controller that may patch every Node (RBAC cannot name them) held to its own marks: ``taint`` (key,
    effect) added or removed, ``labels`` and ``annotations`` set or removed; every other taint, label, annotation,
    spec field, finalizer and owner as it was. With ``only_on`` (resource names), it adds its taint only to a Node
    whose capacity lists one of them: a GPU node, never a control-plane or system node."""
    key, effect = taint
    others = "(has({o}.spec.taints) ? {o}.spec.taints : []).filter(t, t.key != " + cel(key) + ")"
    spec_fields = " && ".join(field_unchanged(f"object.spec.{f}", f"oldObject.spec.{f}") for f in NODE_SPEC_FIELDS)
    marks = ", ".join([*labels, *annotations])
    return Policy(
        name=name,
        summary=f"The {who} changes a Node only by its taint ({key}, {effect}) and its marks ({marks}).",
        resource_rules=(NODE_UPDATES,),
        match_conditions=_is_user("is-" + who.replace(" ", "-"), user),
        validations=(
            Validation(
                expression=f"{others.format(o='object')} == {others.format(o='oldObject')}"
                f" && (!has(object.spec.taints) || object.spec.taints.all(t, t.key != {cel(key)}"
                f" || t.effect == {cel(effect)}))",
                message=f"the {who} may add or remove only its own taint ({key}, {effect}); every other taint stays "
                "as it was",
            ),
            Validation(
                expression=map_unchanged_but("object.metadata.labels", "oldObject.metadata.labels", labels),
                message=f"the {who} may set only its label(s) {', '.join(labels) or '(none)'}",
            ),
            Validation(
                expression=map_unchanged_but(
                    "object.metadata.annotations", "oldObject.metadata.annotations", annotations
                ),
                message=f"the {who} may set only its annotations ({', '.join(annotations) or 'none'})",
            ),
            Validation(
                expression=f"{spec_fields}"
                f" && {field_unchanged('object.metadata.finalizers', 'oldObject.metadata.finalizers')}"
                f" && {field_unchanged('object.metadata.ownerReferences', 'oldObject.metadata.ownerReferences')}",
                message=f"the {who} may not change a Node's spec (but its taint), finalizers or owners",
            ),
            *_taints_only_on(who, key, only_on),
        ),
    )


def _taints_only_on(who: str, key: str, resources: tuple[str, ...]) -> tuple[Validation, ...]:
    if not resources:
        return ()
    has_taint = "(has({o}.spec.taints) && {o}.spec.taints.exists(t, t.key == " + cel(key) + "))"
    adds = f"({has_taint.format(o='object')} && !{has_taint.format(o='oldObject')})"
    capacity = "oldObject.status.capacity"
    on_gpu_node = f"(has(oldObject.status) && has({capacity}) && {cel(list(resources))}.exists(r, r in {capacity}))"
    return (
        Validation(
            expression=f"!{adds} || {on_gpu_node}",
            message=f"the {who} may add its taint ({key}) only to a Node whose capacity lists "
            f"{' or '.join(resources)}: a GPU node, never a control-plane or system node",
            message_expression=f"'the {who} may add its taint ({key}) only to a Node whose capacity lists "
            f"{' or '.join(resources)}; Node ' + object.metadata.name + ' has none: it is no GPU node'",
        ),
    )


def bound_policy(bound: Bound, user: str, gpu_resources: tuple[str, ...]) -> Policy:
    """The admission policy that holds ``user`` (a controller's ServiceAccount) to ``bound``, one of its spec's."""
    if isinstance(bound, JobSetAnnotationOnly):
        return jobset_annotation_only(bound.policy, bound.who, user, bound.annotation)
    return node_marks(
        bound.policy,
        bound.who,
        user,
        taint=(bound.taint_key, bound.taint_effect),
        labels=bound.labels,
        annotations=bound.annotations,
        only_on=gpu_resources,
    )


def declared_bounds(inputs: GuardrailInputs) -> list[Policy]:
    """Every bound a registered controller's spec declares (``contract/bounds.py``), for each controller the stack
    runs."""
    return [
        bound_policy(bound, user, inputs.gpu_resources)
        for spec in CONTROLLERS
        if (user := inputs.user_of(spec.name)) is not None
        for bound in spec.bounds
    ]


def taint_controller_writes_only_its_taint(inputs: GuardrailInputs) -> Policy | None:
    """The taint controller: its NoSchedule burst taint on the virtual node (RBAC names the one Node), nothing
    else of it: no label, annotation, owner or finalizer (an owner would have the garbage collector delete the
    Node that stands for every rented GPU)."""
    if inputs.taint_controller is None:
        return None
    user, key = inputs.taint_controller
    return node_marks(
        "taint-controller-writes-only-its-taint",
        "taint controller",
        user,
        taint=(key, "NoSchedule"),
        labels=[],
        annotations=[],
    )


def make_before_break_writes_only_its_reservations(inputs: GuardrailInputs) -> Policy | None:
    """Make-before-break reserves a gang's nodes: its NoSchedule taint and label under the reservation key."""
    if inputs.make_before_break is None:
        return None
    mbb = inputs.make_before_break
    return node_marks(
        "make-before-break-writes-only-its-reservations",
        "make-before-break controller",
        mbb.user,
        taint=(mbb.reservation_key, "NoSchedule"),
        labels=[mbb.reservation_key],
        annotations=[],
    )


DEPLOYMENT_UPDATES = {
    "apiGroups": ["apps"],
    "apiVersions": ["v1"],
    "resources": ["deployments"],
    "operations": ["UPDATE"],
}
#: A Deployment's spec fields besides its pod template.
DEPLOYMENT_SPEC_FIELDS = (
    "replicas",
    "selector",
    "strategy",
    "minReadySeconds",
    "revisionHistoryLimit",
    "paused",
    "progressDeadlineSeconds",
)
POD_UPDATES = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["UPDATE"]}
ENDPOINT_SLICE_WRITES = {
    "apiGroups": ["discovery.k8s.io"],
    "apiVersions": ["v1"],
    "resources": ["endpointslices"],
    "operations": ["CREATE", "UPDATE", "DELETE"],
}
WORKLOAD_STATUS_UPDATES = {
    "apiGroups": [KUEUE_GROUP],
    "apiVersions": [KUEUE_VERSION],
    "resources": ["workloads/status"],
    "operations": ["UPDATE"],
}
#: A Workload's status fields besides ``admissionChecks`` (Kueue's v1beta2 schema).
WORKLOAD_STATUS_FIELDS = (
    "accumulatedPastExecutionTimeSeconds",
    "admission",
    "clusterName",
    "conditions",
    "nominatedClusterNames",
    "preemptionGates",
    "reclaimablePods",
    "requeueState",
    "resourceRequests",
    "schedulingStats",
    "unhealthyNodes",
)


def make_before_break_moves_only_by_annotations(inputs: GuardrailInputs) -> Policy | None:
    """It moves a Deployment by its annotations and its template's placement epoch; the rest is its owner's."""
    if inputs.make_before_break is None:
        return None
    mbb = inputs.make_before_break
    spec_fields = " && ".join(
        field_unchanged(f"object.spec.{f}", f"oldObject.spec.{f}") for f in DEPLOYMENT_SPEC_FIELDS
    )
    template = "object.spec.template.metadata"
    old_template = "oldObject.spec.template.metadata"
    placement = mbb.template_annotations
    return Policy(
        name="make-before-break-moves-only-by-annotations",
        summary="The make-before-break controller changes a Deployment only by its own annotations and its "
        "template's placement annotations.",
        resource_rules=(DEPLOYMENT_UPDATES,),
        match_conditions=_is_user("is-make-before-break", mbb.user),
        validations=(
            Validation(
                expression=f"{spec_fields} && object.spec.template.spec == oldObject.spec.template.spec"
                f" && {map_unchanged_but(f'{template}.labels', f'{old_template}.labels', [])}"
                f" && {map_unchanged_but(f'{template}.annotations', f'{old_template}.annotations', placement)}"
                f" && {_metadata_unchanged_but(mbb.deployment_annotations)}",
                message="the make-before-break controller may change only its annotations on a Deployment ("
                + ", ".join(mbb.deployment_annotations)
                + ") and on its pod template ("
                + ", ".join(mbb.template_annotations)
                + ")"
                + KEEPS,
            ),
        ),
    )


def pod_annotations_only(
    name: str, match: str, who: str, user: str, *, annotations: Sequence[str], what: str
) -> Policy:
    """``user`` (``who``) changes a pod only by ``annotations`` (``what`` names them in the messages): its spec,
    labels, owners and finalizers as they were."""
    return Policy(
        name=name,
        summary=f"The {who} changes a pod only by {what}.",
        resource_rules=(POD_UPDATES,),
        match_conditions=_is_user(match, user),
        validations=(
            Validation(
                expression=f"object.spec == oldObject.spec && {_metadata_unchanged_but(annotations)}",
                message=f"the {who} may change only a pod's {what.removeprefix('its ')}" + KEEPS,
            ),
        ),
    )


def make_before_break_marks_pods_only_for_removal(inputs: GuardrailInputs) -> Policy | None:
    """It marks the replica to remove first by the pod-deletion-cost annotation; nothing else of a pod."""
    if inputs.make_before_break is None:
        return None
    mbb = inputs.make_before_break
    return pod_annotations_only(
        "make-before-break-marks-pods-only-for-removal",
        "is-make-before-break",
        "make-before-break controller",
        mbb.user,
        annotations=[mbb.pod_annotation],
        what=f"its annotation {mbb.pod_annotation}",
    )


def burst_provider_annotates_pods_only(inputs: GuardrailInputs) -> Policy | None:
    """The burst provider annotates the pods it runs with their instance; nothing else of a pod (RBAC's patch
    cannot be narrowed to annotations, and an owner it added would have the garbage collector delete serving
    pods)."""
    if inputs.burst_provider is None:
        return None
    return pod_annotations_only(
        "burst-provider-annotates-pods-only",
        "is-burst-provider",
        "burst provider",
        inputs.burst_provider,
        annotations=BURST_POD_ANNOTATIONS,
        what="its annotations " + ", ".join(BURST_POD_ANNOTATIONS),
    )


def burst_provider_writes_only_its_endpoint_slices(inputs: GuardrailInputs) -> Policy | None:
    """The burst provider creates, replaces and deletes only the EndpointSlices it manages (for rented replicas):
    never the ones the cluster's own controller keeps for in-cluster pods, which would send a Service's traffic
    wherever the token's holder wants."""
    if inputs.burst_provider is None:
        return None
    ours = f"== {cel(BURST_ENDPOINTS_MANAGER)}"
    return Policy(
        name="burst-provider-writes-only-its-endpoint-slices",
        summary=f"The burst provider writes only EndpointSlices managed by {BURST_ENDPOINTS_MANAGER}.",
        resource_rules=(ENDPOINT_SLICE_WRITES,),
        match_conditions=_is_user("is-burst-provider", inputs.burst_provider),
        validations=(
            Validation(
                expression=f"(request.operation == 'DELETE' || {label('object', ENDPOINT_SLICE_MANAGED_BY_LABEL)} "
                f"{ours}) && (request.operation == 'CREATE' || "
                f"{label('oldObject', ENDPOINT_SLICE_MANAGED_BY_LABEL)} {ours})",
                message=f"the burst provider may write only EndpointSlices labelled "
                f"{ENDPOINT_SLICE_MANAGED_BY_LABEL}={BURST_ENDPOINTS_MANAGER}, before and after",
            ),
        ),
    )


def make_before_break_writes_only_its_check(inputs: GuardrailInputs) -> Policy | None:
    """It sets its own AdmissionCheck's entry in a Workload's status; Kueue's fields and other checks' are Kueue's."""
    if inputs.make_before_break is None:
        return None
    mbb = inputs.make_before_break
    status_fields = " && ".join(
        field_unchanged(f"object.status.{f}", f"oldObject.status.{f}") for f in WORKLOAD_STATUS_FIELDS
    )
    others = (
        "(has({o}.status.admissionChecks) ? {o}.status.admissionChecks : []).filter(c, c.name != "
        + cel(mbb.check_name)
        + ")"
    )
    return Policy(
        name="make-before-break-writes-only-its-check",
        summary=f"The make-before-break controller changes a Workload's status only by its check {mbb.check_name}.",
        resource_rules=(WORKLOAD_STATUS_UPDATES,),
        match_conditions=_is_user("is-make-before-break", mbb.user),
        validations=(
            Validation(
                expression=f"{status_fields} && {others.format(o='object')} == {others.format(o='oldObject')}",
                message=f"the make-before-break controller may set only its own check ({mbb.check_name}) in a "
                "Workload's status",
            ),
        ),
    )


CLUSTER_QUEUE_UPDATES = {
    "apiGroups": [KUEUE_GROUP],
    "apiVersions": [KUEUE_VERSION],
    "resources": ["clusterqueues"],
    "operations": ["UPDATE"],
}
#: A ClusterQueue's spec fields besides ``resourceGroups`` (the pinned Kueue's v1beta2 schema: a test holds this
#: list to its CRD, so a field a Kueue upgrade adds cannot slip past the rule).
CLUSTER_QUEUE_SPEC_FIELDS = (
    "admissionChecksStrategy",
    "admissionScope",
    "cohortName",
    "concurrentAdmissionPolicy",
    "fairSharing",
    "flavorFungibility",
    "namespaceSelector",
    "preemption",
    "queueingStrategy",
    "stopPolicy",
)


def quota_controller_writes_only_quotas(inputs: GuardrailInputs) -> Policy | None:
    """The quota controller applies ``spec.resourceGroups`` of its ClusterQueues (RBAC names them); this holds it to
    the quantities there: the groups, their resources and flavors, and everything else stay as they were."""
    if (user := inputs.user_of(QUOTA_CONTROLLER.name)) is None:
        return None
    groups = "{o}.spec.resourceGroups"
    shape = (
        "g.coveredResources",
        "g.flavors.map(f, f.name)",
        "g.flavors.map(f, f.resources.map(r, r.name))",
    )
    same_shape = " && ".join(
        f"{groups.format(o='object')}.map(g, {part}) == {groups.format(o='oldObject')}.map(g, {part})" for part in shape
    )
    spec_fields = " && ".join(
        field_unchanged(f"object.spec.{f}", f"oldObject.spec.{f}") for f in CLUSTER_QUEUE_SPEC_FIELDS
    )
    return Policy(
        name="quota-controller-writes-only-quotas",
        summary="The quota controller changes a ClusterQueue only by the quantities of its resource groups.",
        resource_rules=(CLUSTER_QUEUE_UPDATES,),
        match_conditions=_is_user("is-quota-controller", user),
        validations=(
            Validation(
                expression=f"{spec_fields} && {_metadata_unchanged_but()}",
                message="the quota controller may change only spec.resourceGroups of a ClusterQueue" + KEEPS,
            ),
            Validation(
                expression=f"has(object.spec.resourceGroups) == has(oldObject.spec.resourceGroups)"
                f" && (!has(object.spec.resourceGroups) || ({same_shape}))",
                message="the quota controller may change only the quantities in spec.resourceGroups (nominalQuota, "
                "borrowingLimit, lendingLimit): the groups, their resources and flavors stay as they are",
            ),
        ),
    )


WORKLOAD_UPDATES = {
    "apiGroups": [KUEUE_GROUP],
    "apiVersions": [KUEUE_VERSION],
    "resources": ["workloads"],
    "operations": ["UPDATE"],
}
JOBSET_UPDATES = {**JOBSETS, "operations": ["UPDATE"]}
#: A Workload's spec fields besides ``active`` (Kueue's v1beta2 schema).
WORKLOAD_SPEC_FIELDS = (
    "maximumExecutionTimeSeconds",
    "podSets",
    "preemptionGates",
    "priority",
    "priorityClassRef",
    "queueName",
)


def _is_user(name: str, user: str) -> tuple[Mapping[str, str], ...]:
    return ({"name": name, "expression": f"request.userInfo.username == {cel(user)}"},)


def _metadata_unchanged_but(annotations: Sequence[str] = ()) -> str:
    """CEL: the object's labels, owners and finalizers as they were, its annotations but ``annotations`` too. A
    controller's token that could add an owner would have the garbage collector delete the object (an owner that
    does not exist, or one about to go); one that could add a finalizer would keep it from ever being deleted."""
    return (
        f"{map_unchanged_but('object.metadata.labels', 'oldObject.metadata.labels', [])}"
        f" && {map_unchanged_but('object.metadata.annotations', 'oldObject.metadata.annotations', annotations)}"
        f" && {field_unchanged('object.metadata.ownerReferences', 'oldObject.metadata.ownerReferences')}"
        f" && {field_unchanged('object.metadata.finalizers', 'oldObject.metadata.finalizers')}"
    )


def jobset_annotation_only(name: str, who: str, user: str, annotation: str) -> Policy:
    """A daemon that patches every JobSet of the team namespaces (RBAC cannot name them) held to one annotation."""
    return Policy(
        name=name,
        summary=f"The {who} changes a JobSet only by its annotation {annotation}.",
        resource_rules=(JOBSET_UPDATES,),
        match_conditions=_is_user("is-" + who.replace(" ", "-"), user),
        validations=(
            Validation(
                expression=f"object.spec == oldObject.spec && {_metadata_unchanged_but([annotation])}",
                message=f"the {who} may change only a JobSet's annotation {annotation}" + KEEPS,
            ),
        ),
    )


def interruptions_only_stops_workloads(inputs: GuardrailInputs) -> Policy | None:
    """It stops a job at its restart bound by ``spec.active: false``; it may not resume one or change anything else."""
    if (user := inputs.user_of(INTERRUPTIONS.name)) is None:
        return None
    spec_fields = " && ".join(field_unchanged(f"object.spec.{f}", f"oldObject.spec.{f}") for f in WORKLOAD_SPEC_FIELDS)
    active = "(!has({o}.spec.active) || {o}.spec.active)"
    return Policy(
        name="interruptions-only-stops-workloads",
        summary="The interruption accounting daemon changes a Workload only by setting spec.active to false.",
        resource_rules=(WORKLOAD_UPDATES,),
        match_conditions=_is_user("is-interruptions", user),
        validations=(
            Validation(
                expression=f"{spec_fields} && {_metadata_unchanged_but()}"
                f" && (!{active.format(o='object')} || {active.format(o='oldObject')})",
                message="the interruption accounting daemon may only set a Workload's spec.active to false" + KEEPS,
            ),
        ),
    )


NODE_CREATES = {**NODE_UPDATES, "operations": ["CREATE"]}


def virtual_node_registers_only_its_node(inputs: GuardrailInputs) -> Policy | None:
    """RBAC cannot name the object of a create: the virtual node's identity may create Nodes, this holds it to its
    own (a second Node would take pods the scheduler thinks are placed)."""
    if inputs.virtual_node is None:
        return None
    user, node = inputs.virtual_node
    return Policy(
        name="virtual-node-registers-only-its-node",
        summary=f"The virtual node registers only the Node {node}.",
        resource_rules=(NODE_CREATES,),
        match_conditions=_is_user("is-virtual-node", user),
        validations=(
            Validation(
                expression=f"object.metadata.name == {cel(node)}",
                message=f"the virtual node may register only the Node {node}",
            ),
        ),
    )

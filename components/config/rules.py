"""Rules between the sections of a stack: each a small function ``(sections) -> Iterable[ConfigIssue]``.

A rule reads :class:`StackSections` and runs only when the sections it needs validated on their own (a quota is
not checked against flavors that are themselves broken). Every rule is registered once, in :data:`RULES`, the
way ``policies/__init__.py`` registers the policy pack; a rule with a twin in the pack carries the twin's name
(the pack checks the rendered resources, the rule the settings before anything is rendered).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from components.config.stack import BURST_KEY, SECTIONS, StackSections
from contract.constants import PROJECT, VIRTUAL_NODE_TAINT_KEY
from contract.issues import ConfigIssue, shown_names
from contract.model import parse_duration
from contract.registry import MAKE_BEFORE_BREAK
from contract.storage_settings import DRIVER_PARAMETERS

Rule = Callable[[StackSections], Iterable[ConfigIssue]]


# --- flavors and queues -------------------------------------------------------------------------------------


def flavors_distinct(s: StackSections) -> Iterator[ConfigIssue]:
    """Each flavor once, and no two flavors on the same node labels (Kueue could not tell their nodes apart)."""
    if s.flavors is None:
        return
    seen: set[str] = set()
    label_sets: dict[tuple[tuple[str, str], ...], str] = {}
    for i, f in enumerate(s.flavors):
        if f.name in seen:
            yield ConfigIssue(f"flavors[{i}].name", f.name, f"flavor {f.name!r} is declared twice")
        seen.add(f.name)
        key = tuple(sorted(f.node_labels.items()))
        if key in label_sets and label_sets[key] != f.name:
            yield ConfigIssue(
                f"flavors[{i}].nodeLabels",
                f.node_labels,
                f"same node labels as flavor {label_sets[key]!r}: Kueue could not tell their nodes apart",
            )
        label_sets.setdefault(key, f.name)


def flavor_topologies_declared(s: StackSections) -> Iterator[ConfigIssue]:
    """Each topology once, and a flavor's topology is one the stack declares (Kueue would leave every queue of
    the flavor inactive: ``TopologyNotFound``)."""
    if s.flavors is None or s.topologies is None:
        return
    names = [t.name for t in s.topologies]
    for i, name in enumerate(names):
        if name in names[:i]:
            yield ConfigIssue(f"topologies[{i}].name", name, f"topology {name!r} is declared twice")
    for i, f in enumerate(s.flavors):
        if f.topology is not None and f.topology not in names:
            why = f"no topology {f.topology!r} in topologies (declared: {shown_names(names)})"
            yield ConfigIssue(f"flavors[{i}].topology", f.topology, why)


def workload_priority_teams_declared(s: StackSections) -> Iterator[ConfigIssue]:
    """A research priority held to some teams names teams the stack declares (a misspelt name would lock the
    team it meant out, at the API server)."""
    if s.priorities is None or s.teams is None:
        return
    names = [t.name for t in s.teams]
    for i, p in enumerate(s.priorities.workload):
        for j, team in enumerate(p.teams or []):
            if team not in names:
                why = f"no team {team!r} in teams (declared: {shown_names(names)})"
                yield ConfigIssue(f"priorities.workload[{i}].teams[{j}]", team, why)


def teams_have_a_research_priority(s: StackSections) -> Iterator[ConfigIssue]:
    """Every team may name at least one research priority: the API server refuses a team's job that names none
    (``guardrails_policies.workloads.research_priority_by_team``), so a team no priority allows could submit
    nothing."""
    if s.priorities is None or s.teams is None:
        return
    for i, t in enumerate(s.teams):
        if not s.priorities.allowed_for(t.name):
            held = shown_names([p.name for p in s.priorities.workload])
            why = (
                f"team {t.name!r} may name no research priority (each of {held} lists its teams and none lists "
                "it): the API server would refuse every job it submits; add it to one priority's teams"
            )
            yield ConfigIssue(f"teams[{i}].name", t.name, why)


def quota_within_capacity(s: StackSections) -> Iterator[ConfigIssue]:
    """A queue's quota names a declared flavor and stays within its GPUs, alone and summed over the queues."""
    if s.flavors is None or s.queues is None:
        return
    capacity = {f.name: f.capacity for f in s.flavors}
    totals: Counter[str] = Counter()
    contributing: Counter[str] = Counter()
    for qname, q in s.queues.items():
        for fname, gpus in q.quota.items():
            path = f"queues.{qname}.quota.{fname}"
            if fname not in capacity:
                yield ConfigIssue(path, gpus, f"unknown flavor {fname!r} (declared: {shown_names(sorted(capacity))})")
                continue
            if gpus > capacity[fname]:
                yield ConfigIssue(path, gpus, f"{gpus} exceeds the {capacity[fname]} GPUs the {fname} flavor declares")
            totals[fname] += gpus
            contributing[fname] += 1
    for fname, total in totals.items():
        if contributing[fname] > 1 and total > capacity[fname]:
            yield ConfigIssue(
                f"queues.*.quota.{fname}",
                total,
                f"the queues' nominal quotas add up to {total}, more than the {capacity[fname]} {fname} GPUs declared",
            )


def borrowing_limits_have_quota(s: StackSections) -> Iterator[ConfigIssue]:
    """A borrowing limit only for a flavor the queue has a quota of."""
    if s.queues is None:
        return
    for qname, q in s.queues.items():
        for fname, limit in q.borrowing_limit.items():
            if fname not in q.quota:
                yield ConfigIssue(
                    f"queues.{qname}.borrowingLimit.{fname}",
                    limit,
                    f"borrowing limit for {fname!r}, which has no quota in this queue",
                )


# --- teams and namespaces -----------------------------------------------------------------------------------


def teams_distinct(s: StackSections) -> Iterator[ConfigIssue]:
    if s.teams is None:
        return
    names: set[str] = set()
    for i, t in enumerate(s.teams):
        if t.name in names:
            yield ConfigIssue(f"teams[{i}].name", t.name, f"team {t.name!r} is declared twice")
        names.add(t.name)


def teams_point_at_queues(s: StackSections) -> Iterator[ConfigIssue]:
    if s.teams is None or s.queues is None:
        return
    for i, t in enumerate(s.teams):
        if t.cluster_queue not in s.queues:
            yield ConfigIssue(
                f"teams[{i}].clusterQueue",
                t.cluster_queue,
                f"no ClusterQueue named {t.cluster_queue!r} in queues (have: {shown_names(sorted(s.queues))})",
            )


def training_apart_from_inference(s: StackSections) -> Iterator[ConfigIssue]:
    """No team namespace is also an inference namespace."""
    if s.teams is None or s.inference_namespaces is None:
        return
    inference = set(s.inference_namespaces)
    for i, t in enumerate(s.teams):
        if t.namespace in inference:
            yield ConfigIssue(
                f"teams[{i}].namespace",
                t.namespace,
                "is also an inference namespace: training and inference must not share a namespace",
            )


def local_queues_agree(s: StackSections) -> Iterator[ConfigIssue]:
    """Teams sharing a namespace and LocalQueue share its ClusterQueue too."""
    if s.teams is None:
        return
    ns_queues: dict[tuple[str, str], str] = {}
    for i, t in enumerate(s.teams):
        nsq = (t.namespace, t.local_queue)
        if nsq in ns_queues and ns_queues[nsq] != t.cluster_queue:
            yield ConfigIssue(
                f"teams[{i}].localQueue",
                t.local_queue,
                f"LocalQueue {t.local_queue!r} in {t.namespace!r} already points at {ns_queues[nsq]!r}",
            )
        ns_queues.setdefault(nsq, t.cluster_queue)


def cpu_queue_name_free(s: StackSections) -> Iterator[ConfigIssue]:
    """The queue for CPU-only work (``kueue.cpuQueue``) is a ClusterQueue, a ResourceFlavor and a LocalQueue in every
    team namespace by one name: no GPU queue, flavor or team LocalQueue may take it."""
    if s.kueue is None:
        return
    name = s.kueue.cpu_queue.name
    for qname in s.queues or {}:
        if qname == name:
            yield ConfigIssue(f"queues.{qname}", qname, "is kueue.cpuQueue.name, the ClusterQueue of CPU-only work")
    for i, f in enumerate(s.flavors or []):
        if f.name == name:
            yield ConfigIssue(f"flavors[{i}].name", f.name, "is kueue.cpuQueue.name, the flavor of CPU-only work")
    for i, t in enumerate(s.teams or []):
        if t.local_queue == name:
            why = "is kueue.cpuQueue.name, every team namespace's LocalQueue of CPU-only work"
            yield ConfigIssue(f"teams[{i}].localQueue", t.local_queue, why)


def inference_namespaces_distinct(s: StackSections) -> Iterator[ConfigIssue]:
    if s.inference_namespaces is not None and len(set(s.inference_namespaces)) != len(s.inference_namespaces):
        yield ConfigIssue("inferenceNamespaces", list(s.inference_namespaces), "lists a namespace twice")


# --- priorities ---------------------------------------------------------------------------------------------


def training_above_inference(s: StackSections) -> Iterator[ConfigIssue]:
    """Training's PriorityClass is above inference's, and they are two classes."""
    if s.priorities is None:
        return
    train, infer = s.priorities.pod.training, s.priorities.pod.inference
    if train.value <= infer.value:
        yield ConfigIssue(
            "priorities.pod.training.value",
            train.value,
            f"training priority {train.value} must be above inference's {infer.value}: training always wins",
        )
    if train.name == infer.name:
        yield ConfigIssue("priorities.pod.inference.name", infer.name, "same name as the training class")


def workload_priorities_ordered(s: StackSections) -> Iterator[ConfigIssue]:
    """Workload priorities listed highest first, each name once."""
    if s.priorities is None:
        return
    wl = s.priorities.workload
    for i in range(1, len(wl)):
        if wl[i].value >= wl[i - 1].value:
            yield ConfigIssue(
                f"priorities.workload[{i}].value",
                wl[i].value,
                f"workload priorities are listed highest first: {wl[i].name!r} ({wl[i].value}) must be "
                f"below {wl[i - 1].name!r} ({wl[i - 1].value})",
            )
    seen: set[str] = set()
    for i, w in enumerate(wl):
        if w.name in seen:
            yield ConfigIssue(f"priorities.workload[{i}].name", w.name, f"{w.name!r} is declared twice")
        seen.add(w.name)


# --- descheduler and storage --------------------------------------------------------------------------------


def descheduler_bounded(s: StackSections) -> Iterator[ConfigIssue]:
    """The per-node eviction bound is within the total one (else the total would never apply)."""
    d = s.descheduler
    if d is not None and d.max_pods_to_evict_per_node > d.max_pods_to_evict_total:
        yield ConfigIssue(
            "descheduler.maxPodsToEvictPerNode",
            d.max_pods_to_evict_per_node,
            f"{d.max_pods_to_evict_per_node} exceeds maxPodsToEvictTotal ({d.max_pods_to_evict_total}): "
            "the total bound would never apply",
        )


def storage_mode_complete(s: StackSections) -> Iterator[ConfigIssue]:
    """Static mode has its volume handles; dynamic mode has what its driver's StorageClass needs."""
    st = s.storage
    if st is None:
        return
    if st.mode == "static" and not st.volume_handle_prefix:
        yield ConfigIssue("storage.volumeHandlePrefix", None, "static mode needs it (the CSI volumeHandle of each PV)")
    if st.mode == "dynamic" and st.volume_handle_prefix:
        yield ConfigIssue("storage.volumeHandlePrefix", st.volume_handle_prefix, "only applies to mode: static")
    if st.mode == "dynamic":
        for needed in DRIVER_PARAMETERS.get(st.driver, ()):
            if needed not in st.parameters:
                yield ConfigIssue(
                    f"storage.parameters.{needed}", None, f"the {st.driver} driver's StorageClass needs it"
                )


# --- bursting -----------------------------------------------------------------------------------------------


def burst_daemons_in_own_namespace(s: StackSections) -> Iterator[ConfigIssue]:
    """The virtual node and the taint controller live apart from team and inference namespaces."""
    if s.burst is None:
        return
    taken = s.training_namespaces | set(s.inference_namespaces or ())
    vn, tc = s.burst.settings.virtual_node, s.burst.taint_controller
    for path, ns in (("burst.virtualNode.namespace", vn.namespace), ("burst.taintController.namespace", tc.namespace)):
        if ns in taken:
            yield ConfigIssue(
                path, ns, "is a team or inference namespace: the burst daemons get a namespace of their own"
            )


def burst_inference_namespaces_known(s: StackSections) -> Iterator[ConfigIssue]:
    """The namespaces the burst daemons serve are the stack's inference namespaces."""
    if s.burst is None or s.inference_namespaces is None:
        return
    for path, listed in (
        ("burst.virtualNode.inferenceNamespaces", s.burst.settings.virtual_node.inference_namespaces),
        ("burst.taintController.inferenceNamespaces", s.burst.taint_controller.inference_namespaces),
    ):
        extra = sorted(set(listed) - set(s.inference_namespaces))
        if extra:
            yield ConfigIssue(
                path,
                listed,
                f"{shown_names(extra)} not in {PROJECT}:inferenceNamespaces ({shown_names(s.inference_namespaces)})",
            )


def burst_taint_apart_from_virtual_node(s: StackSections) -> Iterator[ConfigIssue]:
    """The burst taint is not the virtual node's own taint (that one only says "tolerate me to burst")."""
    if s.burst is not None and s.burst_taint_key is not None and s.burst_taint_key.startswith("virtual-kubelet.io/"):
        yield ConfigIssue(
            "burstTaintKey",
            s.burst_taint_key,
            f"must differ from the virtual node's own taint key ({VIRTUAL_NODE_TAINT_KEY})",
        )


def burst_high_mark_reachable(s: StackSections) -> Iterator[ConfigIssue]:
    """The taint controller's highMark can happen: at most the GPUs the flavors declare."""
    if s.burst is None or s.flavors is None or not s.burst.taint_controller.enabled:
        return
    tc = s.burst.taint_controller
    total = sum(f.capacity for f in s.flavors)
    if tc.high_mark > total:
        yield ConfigIssue(
            "burst.taintController.highMark",
            tc.high_mark,
            f"{tc.high_mark} free GPUs can never happen with the {total} GPUs the flavors declare: "
            "the burst taint would never go on",
        )


def provider_secrets_not_in_config(s: StackSections) -> Iterator[ConfigIssue]:
    """Every secret an enabled burst provider names is set in this stack, and set as a secret."""
    if s.burst is None or not s.burst.enabled:
        return
    for name, path in s.burst.secret_paths().items():
        if name in SECTIONS or name == BURST_KEY:
            yield ConfigIssue(path, name, f"{name!r} is a config section, not a secret config key")
        elif name not in s.raw:
            yield ConfigIssue(
                path,
                name,
                f"names the secret {PROJECT}:{name}, which this stack does not set "
                f"(pulumi config set --secret {name} ...)",
            )
        elif not s.is_secret(name):
            # Never echo the value: it is a credential in clear.
            yield ConfigIssue(name, None, f"{PROJECT}:{name} is in clear; set it with `pulumi config set --secret`")


# --- inference services -------------------------------------------------------------------------------------


def inference_services_in_inference_namespaces(s: StackSections) -> Iterator[ConfigIssue]:
    """An inference service runs in an inference namespace, never in a team's training namespace."""
    if s.inference_services is None:
        return
    teams = {t.namespace: t.name for t in s.teams} if s.teams is not None else {}
    for i, svc in enumerate(s.inference_services):
        path = f"inferenceServices[{i}].namespace"
        if svc.namespace in teams:
            yield ConfigIssue(
                path,
                svc.namespace,
                f"is team {teams[svc.namespace]!r}'s training namespace: inference never runs there",
            )
        elif s.inference_namespaces is not None and svc.namespace not in s.inference_namespaces:
            yield ConfigIssue(
                path, svc.namespace, f"is not an inference namespace ({shown_names(s.inference_namespaces)})"
            )


def inference_services_distinct(s: StackSections) -> Iterator[ConfigIssue]:
    if s.inference_services is None:
        return
    seen: set[tuple[str, str]] = set()
    for i, svc in enumerate(s.inference_services):
        if (svc.namespace, svc.name) in seen:
            yield ConfigIssue(f"inferenceServices[{i}].name", svc.name, f"{svc.namespace}/{svc.name} is declared twice")
        seen.add((svc.namespace, svc.name))


def inference_gpu_types_offered(s: StackSections) -> Iterator[ConfigIssue]:
    """While bursting is on, some provider offers the GPU type each inference service asks for."""
    if s.inference_services is None or s.burst is None or not s.burst.enabled:
        return
    offered = s.burst.settings.gpu_types()
    for i, svc in enumerate(s.inference_services):
        if svc.gpu_type is not None and svc.gpu_type not in offered:
            yield ConfigIssue(
                f"inferenceServices[{i}].gpuType",
                svc.gpu_type,
                f"no burst provider offers {svc.gpu_type!r} (offered: {shown_names(offered)})",
            )


# --- make-before-break --------------------------------------------------------------------------------------


def make_before_break_hold_below_pods_ready_timeout(s: StackSections) -> Iterator[ConfigIssue]:
    """A gang is held for its room for less than Kueue's waitForPodsReady timeout: with blockAdmission a held
    check stalls every admission, so the hold may not stall them longer than a gang that never gets ready would."""
    mbb, kueue = s.controller(MAKE_BEFORE_BREAK), s.kueue
    if mbb is None or kueue is None or not mbb.enabled or not kueue.wait_for_pods_ready.enable:
        return
    timeout = kueue.wait_for_pods_ready.timeout
    if mbb.max_hold_seconds >= parse_duration(timeout):
        yield ConfigIssue(
            "makeBeforeBreak.maxHold",
            mbb.max_hold,
            f"must be shorter than kueue.waitForPodsReady.timeout ({timeout}): with blockAdmission a held gang "
            "stalls every Kueue admission, and the hold must not stall them longer than that timeout does",
        )


def make_before_break_reservation_apart(s: StackSections) -> Iterator[ConfigIssue]:
    """The reservation taint is neither the burst taint nor the virtual node's: each taint means one thing."""
    mbb = s.controller(MAKE_BEFORE_BREAK)
    if mbb is None or s.burst_taint_key is None:
        return
    if mbb.reservation_key == s.burst_taint_key:
        yield ConfigIssue(
            "makeBeforeBreak.reservationKey",
            mbb.reservation_key,
            f"is {PROJECT}:burstTaintKey too: a node reserved for a gang and the virtual node's switch must differ",
        )


def make_before_break_in_own_namespace(s: StackSections) -> Iterator[ConfigIssue]:
    """The controller lives apart from team and inference namespaces, and moves only inference Deployments."""
    mbb = s.controller(MAKE_BEFORE_BREAK)
    if mbb is None:
        return
    if mbb.namespace in s.training_namespaces | set(s.inference_namespaces or ()):
        yield ConfigIssue(
            "makeBeforeBreak.namespace",
            mbb.namespace,
            "is a team or inference namespace: the controller gets a namespace of its own",
        )
    if s.inference_namespaces is not None and "inference_namespaces" in mbb.model_fields_set:
        extra = sorted(set(mbb.inference_namespaces) - set(s.inference_namespaces))
        if extra:
            yield ConfigIssue(
                "makeBeforeBreak.inferenceNamespaces",
                mbb.inference_namespaces,
                f"{shown_names(extra)} not in {PROJECT}:inferenceNamespaces ({shown_names(s.inference_namespaces)})",
            )


def make_before_break_reserved_not_headroom(s: StackSections) -> Iterator[ConfigIssue]:
    """While both run, the taint controller's headroom leaves out reserved nodes: GPUs promised to a waiting gang
    are not room for inference to come home to, or the two paths would move the same replicas both ways."""
    mbb = s.controller(MAKE_BEFORE_BREAK)
    if mbb is None or not mbb.enabled or s.burst is None or not s.burst.enabled:
        return
    tc = s.burst.taint_controller
    if tc.enabled and mbb.reservation_key not in tc.headroom_query:
        yield ConfigIssue(
            "burst.taintController.headroomQuery",
            None,
            f"does not leave out nodes with the reservation taint {mbb.reservation_key} "
            f'(unless on(node) kube_node_spec_taint{{key="{mbb.reservation_key}"}} on both sides): '
            "GPUs reserved for a gang would count as headroom",
        )


def make_before_break_has_somewhere_to_move(s: StackSections) -> Iterator[ConfigIssue]:
    """Make-before-break moves serving to the virtual node before a gang takes its GPUs; with bursting off there is
    nowhere to move to. A gang that needs the whole cluster would then be held for maxHold and preempt production
    anyway: the hold only delays training. Both go on together, or make-before-break stays off."""
    mbb = s.controller(MAKE_BEFORE_BREAK)
    if mbb is None or not mbb.enabled or (s.burst.enabled if s.burst is not None else BURST_KEY in s.raw):
        return  # bursting on, or a burst section with problems of its own
    yield ConfigIssue(
        "makeBeforeBreak.enabled",
        True,
        f"is on with bursting off ({PROJECT}:burst.enabled is false): serving has nowhere to move to, so a gang "
        f"that needs the whole cluster is held for maxHold ({mbb.max_hold}) and then preempts production anyway; "
        "turn bursting on, or make-before-break off until it is",
    )


def request_rate_hpas_have_an_adapter(s: StackSections) -> Iterator[ConfigIssue]:
    """An HPA on the request rate reads the metrics adapter: without it the HPA never gets a value and never
    scales (it keeps its replica count, FailedGetObjectMetric)."""
    if s.inference_services is None or s.metrics_adapter is None or s.metrics_adapter.enabled:
        return
    for i, svc in enumerate(s.inference_services):
        if svc.hpa is not None and svc.hpa.target_requests_per_replica is not None:
            yield ConfigIssue(
                f"inferenceServices[{i}].hpa.targetRequestsPerReplica",
                svc.hpa.target_requests_per_replica,
                f"needs {PROJECT}:metricsAdapter.enabled: nothing else serves the request rate an HPA reads",
            )


def installed_operators_exempt_from_guardrails(s: StackSections) -> Iterator[ConfigIssue]:
    """An NVIDIA operator the stack installs runs privileged driver, toolkit and device plugin pods that see every
    GPU or NIC: its namespace must be one the guardrails exempt, or the API server refuses its pods and the
    resource it exists to advertise never appears."""
    if s.prerequisites is None or s.guardrails is None or not s.guardrails.enabled:
        return
    for key, operator in (
        ("gpuOperator", s.prerequisites.gpu_operator),
        ("networkOperator", s.prerequisites.network_operator),
    ):
        if operator.install and operator.namespace not in s.guardrails.exempt_namespaces:
            yield ConfigIssue(
                f"prerequisites.{key}.namespace",
                operator.namespace,
                f"is not in {PROJECT}:guardrails.exemptNamespaces: the operator's privileged pods there would be "
                "refused; add it",
            )


#: Every rule, in the order their problems are reported.
RULES: list[Rule] = [
    flavors_distinct,
    flavor_topologies_declared,
    quota_within_capacity,
    borrowing_limits_have_quota,
    teams_distinct,
    teams_point_at_queues,
    training_apart_from_inference,
    local_queues_agree,
    cpu_queue_name_free,
    inference_namespaces_distinct,
    training_above_inference,
    workload_priorities_ordered,
    workload_priority_teams_declared,
    teams_have_a_research_priority,
    descheduler_bounded,
    storage_mode_complete,
    burst_daemons_in_own_namespace,
    burst_inference_namespaces_known,
    burst_taint_apart_from_virtual_node,
    burst_high_mark_reachable,
    provider_secrets_not_in_config,
    inference_services_in_inference_namespaces,
    inference_services_distinct,
    inference_gpu_types_offered,
    make_before_break_hold_below_pods_ready_timeout,
    make_before_break_reservation_apart,
    make_before_break_in_own_namespace,
    make_before_break_reserved_not_headroom,
    make_before_break_has_somewhere_to_move,
    request_rate_hpas_have_an_adapter,
    installed_operators_exempt_from_guardrails,
]


def rule_issues(sections: StackSections, rules: Iterable[Rule] = RULES) -> list[ConfigIssue]:
    """Every problem the rules find, in their order."""
    return [issue for rule in rules for issue in rule(sections)]

"""The job spec a researcher writes (``job.yaml``) and how it is read: :class:`JobSpec`, :func:`load_spec`.

One small typed document: what to run (image, command, args, env), how big (nodes, GPUs per node), whose
(team, research priority) and how long one checkpoint takes to write. Everything else a training job needs (the
team's queue, the training PriorityClass, the claims, the restart policy, the checkpoint interval) comes from the
stack (``manifest.py``). A bad spec is refused with every problem at once, each naming its field as
``spec.<field>``, never with a stack trace; a spec that parses is then checked against the stack (``checks.py``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from contract.documents import DocumentError, read_document
from contract.guardrails_settings import credential_literal
from contract.image_refs import image_problem
from contract.issues import ConfigIssue, SettingsError, issues_from_validation_error, shown
from contract.model import ConfigModel, DnsLabel, check_qualified_name, parse_duration

#: Every problem of a spec is reported under this prefix: ``spec.nodes: must be at least 1``.
SPEC_PATH = "spec"
#: Longest job name: JobSet names its pods ``<name>-node-0-<index>-<suffix>`` and its Jobs ``<name>-node-0``, and
#: a pod's hostname (a DNS label, 63 characters) must hold the name with those parts.
MAX_NAME = 40
#: GPUs one node may carry (the flavors' own bound).
MAX_GPUS_PER_NODE = 16
#: Nodes one job may ask for (the flavors' own bound on a node count).
MAX_NODES = 10_000
#: Environment names the job gets from the package; a spec cannot set or override them.
RESERVED_ENV_PREFIX = "GPUCLUSTER_"
#: The launcher's environment (``manifest.launcher_env``): it forms the gang, so a spec cannot change it.
LAUNCHER_ENV = frozenset(
    {
        "PET_NNODES",
        "PET_NPROC_PER_NODE",
        "PET_NODE_RANK",
        "PET_RDZV_BACKEND",
        "PET_RDZV_ENDPOINT",
        "PET_MAX_RESTARTS",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
RESERVED_ENV = LAUNCHER_ENV
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: A JobSet's name is also its headless Service's name: a DNS-1035 label (starts with a letter).
_JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _check_name(value: str) -> str:
    if len(value) > MAX_NAME:
        raise ValueError(f"{shown(value)} is longer than {MAX_NAME} characters (JobSet's pod names must fit in 63)")
    if not _JOB_NAME.match(value):
        raise ValueError(f"{shown(value)} must start with a letter and hold only lower-case letters, digits and '-'")
    return value


def _at_least_one(value: int) -> int:
    if value < 1:
        raise ValueError("must be at least 1")
    if value > MAX_NODES:
        raise ValueError(f"must be at most {MAX_NODES}")
    return value


def _gpus(value: int) -> int:
    if not 1 <= value <= MAX_GPUS_PER_NODE:
        raise ValueError(f"must be between 1 and {MAX_GPUS_PER_NODE} (got {value})")
    return value


def _image(value: str) -> str:
    problem = image_problem(value)
    if problem is not None:
        raise ValueError(f"{shown(value)} {problem} (registry/name:tag or @sha256:..., as every workload's)")
    return value


#: The longest checkpoint write a spec may state: a day (a checkpoint that takes longer is not one).
MAX_WRITE_SECONDS = 86_400.0


def _write_seconds(value: float) -> float:
    if not math.isfinite(value) or not 0 < value <= MAX_WRITE_SECONDS:
        raise ValueError(f"must be more than 0 and at most {MAX_WRITE_SECONDS:g} seconds (a day)")
    return value


#: The shortest and longest stallAfter a job may set.
MIN_STALL_AFTER_S = 10.0
MAX_STALL_AFTER_S = 7 * 86400.0


def _stall_after(value: str) -> str:
    seconds = parse_duration(value)
    if not MIN_STALL_AFTER_S <= seconds < MAX_STALL_AFTER_S:
        raise ValueError(f"{shown(value)} must be at least 10s and less than 7 days")
    return value


#: Annotation prefix of Kueue's own pod-set settings: the package sets them (``spec.topology``), a spec does not.
KUEUE_ANNOTATION_PREFIX = "kueue.x-k8s.io/"


class JobTopology(ConfigModel):
    """How tightly the gang must sit on the fabric: inside one domain of a level of the flavor's topology
    (``gpucluster:topologies[].levels[].name``, such as ``block`` or ``leaf``).

    ``required``: all pods in one domain of that level, or the job waits. ``preferred``: that level if it can,
    wider when it must (Kueue's ``podset-required-topology`` / ``podset-preferred-topology``).
    """

    required: DnsLabel | None = None
    preferred: DnsLabel | None = None

    @model_validator(mode="after")
    def _one(self) -> JobTopology:
        if (self.required is None) == (self.preferred is None):
            raise ValueError("name exactly one of required or preferred (a level of the flavor's topology)")
        return self

    @property
    def level(self) -> str:
        return self.required or self.preferred or ""

    @property
    def strict(self) -> bool:
        """``required``: the gang waits rather than sit wider."""
        return self.required is not None

    @property
    def key(self) -> str:
        """The spec key that names the level: ``required`` or ``preferred``."""
        return "required" if self.strict else "preferred"


#: Where ``secretFiles`` mount, each Secret in a directory of its own name (its keys are the files).
SECRET_FILES_DIR = "/var/run/secrets/gpucluster"
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _secret_name(value: str) -> str:
    if len(value) > 253 or not _SECRET_NAME.match(value):
        raise ValueError(f"{shown(value)} is not a Secret name (lower-case letters, digits, '-' and '.')")
    return value


SecretName = Annotated[str, AfterValidator(_secret_name)]


class SecretKeyRef(ConfigModel):
    """One key of a Secret in the team's own namespace (the team creates it: ``kubectl create secret``)."""

    secret: SecretName
    key: Annotated[str, Field(pattern=_SECRET_KEY.pattern)]


def _env_name(key: str) -> str:
    if not _ENV_NAME.match(key):
        raise ValueError(f"{shown(key)} is not an environment variable name (letters, digits, '_')")
    if key.startswith(RESERVED_ENV_PREFIX) or key in RESERVED_ENV:
        raise ValueError(
            f"{key} is set by the package (names starting with {RESERVED_ENV_PREFIX}, "
            f"{', '.join(sorted(RESERVED_ENV))}); choose another name"
        )
    return key


class JobSpec(ConfigModel):
    """A training job as a researcher writes it (camelCase keys; unknown keys refused)."""

    name: Annotated[str, AfterValidator(_check_name)]
    team: DnsLabel
    image: Annotated[str, AfterValidator(_image)]
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    args: list[str] = []
    nodes: Annotated[int, AfterValidator(_at_least_one)]
    gpus_per_node: Annotated[int, AfterValidator(_gpus)]
    #: A Kueue WorkloadPriorityClass of the stack (``priorities.workload``).
    priority: DnsLabel
    #: Seconds one complete checkpoint takes to write; default: the stack's ``storage.checkpointing.writeSeconds``.
    checkpoint_write_seconds: Annotated[float, AfterValidator(_write_seconds)] | None = None
    env: dict[str, str] = {}
    #: Env values read from Secrets of the team's namespace at run time: never in the spec, the JobSet or etcd's copy
    #: of it (an API key, a token).
    secret_env: dict[str, SecretKeyRef] = {}
    #: Secrets of the team's namespace mounted read-only as files, each at ``/var/run/secrets/gpucluster/<name>``.
    secret_files: Annotated[list[SecretName], Field(max_length=16)] = []
    #: Default: the stack's ``training.maxRestartsPerHour``.
    max_restarts_per_hour: Annotated[int, Field(ge=1, le=60)] | None = None
    #: Restarts for the program's faults over the job's life; default: the stack's ``training.maxRestarts``.
    max_restarts: Annotated[int, Field(ge=0, le=10_000)] | None = None
    #: A GPU flavor of the stack the job must fit (nodes x GPUs per node); default: any flavor of its queue.
    flavor: DnsLabel | None = None
    #: Annotations on every pod of the job (a profiler's or sidecar's settings); keys are qualified names.
    pod_annotations: dict[str, str] = {}
    #: How long the gang may show no tensor activity, no fabric traffic and no progress before the stall detector
    #: restarts it (10s to 7 days); default: the stack's ``stallDetector.stallAfter``.
    stall_after: Annotated[str, AfterValidator(_stall_after)] | None = None
    #: How tightly the gang sits on the fabric; default: the topology's default level, preferred (a flavor
    #: without a topology: anywhere).
    topology: JobTopology | None = None

    @field_validator("pod_annotations")
    @classmethod
    def _annotations(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            check_qualified_name(key, "annotation key")
            if key.startswith(KUEUE_ANNOTATION_PREFIX):
                raise ValueError(f"{key} is Kueue's and the package sets it (placement: spec.topology); remove it")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        leaks = []
        for key, value in v.items():
            _env_name(key)
            why = credential_literal(key, value)
            if why is not None:  # the value is never shown
                leaks.append(f"{key} ({why})")
        if leaks:
            first = leaks[0].split(" ", 1)[0]
            raise ValueError(
                f"{', '.join(leaks)}: a credential in the job spec would be kept in plain text; keep each in a "
                f"Secret of the team's namespace and name it under secretEnv ({first}: {{secret: <name>, key: <key>}})"
            )
        return v

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, v: dict[str, SecretKeyRef]) -> dict[str, SecretKeyRef]:
        for key in v:
            _env_name(key)
        return v

    @model_validator(mode="after")
    def _env_once(self) -> JobSpec:
        both = sorted(set(self.env) & set(self.secret_env))
        if both:
            raise ValueError(f"env and secretEnv both set {', '.join(both)}: set each name once")
        if len(set(self.secret_files)) != len(self.secret_files):
            raise ValueError("secretFiles names a Secret twice")
        return self


class SpecError(SettingsError):
    """Every problem of one job spec at once, each with its ``spec.<field>`` path."""

    def __init__(self, issues: list[ConfigIssue], source: str = "job spec") -> None:
        super().__init__(issues, source)


def parse_spec(raw: Any, source: str = "job spec") -> JobSpec:
    """Validate a decoded spec document; :class:`SpecError` lists every problem with its field."""
    if not isinstance(raw, dict):
        raise SpecError([ConfigIssue(SPEC_PATH, None, f"expected a map of job fields, got {shown(raw)}")], source)
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as err:
        raise SpecError(issues_from_validation_error(err, SPEC_PATH), source) from None


def load_spec(path: Path | str) -> JobSpec:
    """Read and validate ``path``; a file that cannot be read or is not YAML is refused naming the file (and the
    line, for YAML that does not parse)."""
    path = Path(path)
    try:
        raw = read_document(path, "yaml")
    except DocumentError as exc:
        raise SpecError([ConfigIssue(str(path), None, exc.reason)], str(path)) from None
    return parse_spec(raw, str(path))

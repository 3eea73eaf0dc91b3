""".github/workflows/release.yml: what a release must do, read from the workflow itself.

A pushed tag ``v*`` triggers it; the tag is checked against pyproject's version before anything is built; the
images are built by ``make images`` (or ``python -m images build``) in Debian bookworm, privileged; every image
``make images`` builds is pushed from its OCI archive by skopeo, and the registry's digests are compared with
digests.json after the push, and their build provenance attested after that; the token's permissions are
declared and never write-all; every action is pinned by a commit. :func:`problems` says what the parsed workflow
lacks; each check is shown to refuse a workflow that breaks it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.images_settings import IMAGE_NAMES

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
_PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$")

Workflow = dict[Any, Any]


def load() -> Workflow:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(doc, dict), f"{WORKFLOW} is not a mapping"
    return doc


def triggers(wf: Workflow) -> dict[str, Any]:
    """``on:`` (YAML 1.1 reads the bare key ``on`` as ``True``)."""
    on = wf.get("on", wf.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on or {})


def steps(wf: Workflow) -> list[tuple[str, int, dict[str, Any]]]:
    """(job, index, step) for every step of every job."""
    return [(job, i, s) for job, spec in (wf.get("jobs") or {}).items() for i, s in enumerate(spec.get("steps") or [])]


def text(step: dict[str, Any]) -> str:
    """What a step runs and the environment it gives it."""
    env = " ".join(str(v) for v in (step.get("env") or {}).values())
    return f"{step.get('run', '')}\n{env}"


def first(wf: Workflow, found: Callable[[dict[str, Any]], bool]) -> tuple[str, int] | None:
    return next(((job, i) for job, i, s in steps(wf) if found(s)), None)


_BUILD = re.compile(r"^\s*(?:make images|\S*python3? -m images build)(?:\s|$)", re.MULTILINE)


def runs_build(step: dict[str, Any]) -> bool:
    """A line that runs the build (a line that only mentions it, in an echo, does not count)."""
    return _BUILD.search(str(step.get("run", ""))) is not None


def checks_version(step: dict[str, Any]) -> bool:
    run = str(step.get("run", ""))
    return (
        "pyproject" in run
        and ("GITHUB_REF_NAME" in run or "github.ref_name" in run)
        and re.search(r"\bexit [1-9]", run) is not None
    )


def pushes(step: dict[str, Any], name: str) -> bool:
    body = text(step)
    return (
        "skopeo copy" in body
        and "--preserve-digests" in body
        and "oci-archive:.state/images/" in body
        and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", body) is not None
    )


def compares_digests(step: dict[str, Any]) -> bool:
    body = text(step)
    return "skopeo inspect" in body and "digests.json" in body and re.search(r"\bexit [1-9]", body) is not None


def check_trigger(wf: Workflow) -> list[str]:
    push = triggers(wf).get("push") or {}
    tags = push.get("tags") if isinstance(push, dict) else None
    return [] if tags and "v*" in tags else ["the workflow does not run on a pushed tag v*"]


def check_order(wf: Workflow) -> list[str]:
    """The tag is checked, then the images built, then pushed, then the registry compared, in one job."""
    found = {
        "the tag/version check": first(wf, checks_version),
        "a build by make images or python -m images build": first(wf, runs_build),
        **{f"a skopeo push of {n} from its oci-archive": first(wf, partial(pushes, name=n)) for n in IMAGE_NAMES},
        "a skopeo inspect of the pushed digests against digests.json": first(wf, compares_digests),
    }
    out = [f"no step does {what}" for what, where in found.items() if where is None]
    if out:
        return out
    located = [where for where in found.values() if where is not None]
    if len({job for job, _ in located}) != 1:
        return ["the check, build, push and digest comparison are not one job's steps"]
    order = [i for _, i in located]
    if order != sorted(order):
        return ["the steps are out of order: tag check, build, push, digest comparison"]
    return []


def check_container(wf: Workflow) -> list[str]:
    where = first(wf, runs_build)
    if where is None:
        return []  # check_order says so
    container = wf["jobs"][where[0]].get("container") or {}
    image = container if isinstance(container, str) else container.get("image", "")
    options = "" if isinstance(container, str) else str(container.get("options", ""))
    if image != "debian:bookworm" or "--privileged" not in options:
        return [f"job {where[0]} does not build in a privileged debian:bookworm container"]
    return []


def check_permissions(wf: Workflow) -> list[str]:
    """Declared, never write-all, and no write to the repository: the push goes to a registry (``packages: write``
    is what ghcr.io would need), and nothing of a release writes code or tags."""
    out = []
    top = wf.get("permissions")
    if top == "write-all":
        out.append("the workflow's permissions are write-all")
    for job, spec in (wf.get("jobs") or {}).items():
        perms = spec.get("permissions", top)
        if perms is None:
            out.append(f"job {job} declares no permissions (the token's default may write)")
        elif perms == "write-all":
            out.append(f"job {job}'s permissions are write-all")
        elif isinstance(perms, dict) and perms.get("contents") == "write":
            out.append(f"job {job} may write the repository (contents: write)")
    return out


def check_pinned(wf: Workflow) -> list[str]:
    used = [(job, s["uses"]) for job, _, s in steps(wf) if "uses" in s]
    return [f"job {job}: {uses} is not pinned by a commit" for job, uses in used if not _PINNED.match(uses)]


ATTEST = "actions/attest-build-provenance@"


def attests(step: dict[str, Any]) -> bool:
    return str(step.get("uses", "")).startswith(ATTEST) and bool(
        (step.get("with") or {}).get("subject-checksums") or (step.get("with") or {}).get("subject-digest")
    )


def check_attested(wf: Workflow) -> list[str]:
    """The pushed digests' build provenance is attested after they were compared, by a job allowed to."""
    compared, attested = first(wf, compares_digests), first(wf, attests)
    if attested is None:
        return ["no step attests the images' build provenance (actions/attest-build-provenance)"]
    if compared is not None and (compared[0] != attested[0] or attested[1] < compared[1]):
        return ["the attestation does not follow the digest comparison in the same job"]
    perms = wf["jobs"][attested[0]].get("permissions", wf.get("permissions")) or {}
    if not isinstance(perms, dict) or perms.get("id-token") != "write" or perms.get("attestations") != "write":
        return [f"job {attested[0]} may not attest (id-token: write and attestations: write)"]
    return []


CHECKS = (check_trigger, check_order, check_container, check_permissions, check_pinned, check_attested)


def problems(wf: Workflow) -> list[str]:
    return [p for check in CHECKS for p in check(wf)]


# --- the workflow as committed ------------------------------------------------------------------------------------


def test_the_release_workflow_does_what_a_release_must() -> None:
    assert problems(load()) == []


def test_the_build_labels_the_images_with_this_repository_and_prods_registry() -> None:
    wf = load()
    where = first(wf, runs_build)
    assert where is not None
    run = wf["jobs"][where[0]]["steps"][where[1]]["run"]
    assert "--source ${GITHUB_SERVER_URL}/${GITHUB_REPOSITORY}" in run
    assert "--stack prod" in run


# --- each check refuses a workflow that breaks it ----------------------------------------------------------------


def _job(wf: Workflow) -> dict[str, Any]:
    job: dict[str, Any] = wf["jobs"]["images"]
    return job


def _step(wf: Workflow, found: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    where = first(wf, found)
    assert where is not None
    step: dict[str, Any] = wf["jobs"][where[0]]["steps"][where[1]]
    return step


def _on(wf: Workflow) -> dict[str, Any]:
    on: dict[str, Any] = wf[True] if True in wf else wf["on"]
    return on


def _no_tags(wf: Workflow) -> None:
    _on(wf)["push"] = {"branches": ["main"]}


def _other_tags(wf: Workflow) -> None:
    _on(wf)["push"]["tags"] = ["release-*"]


def _no_build(wf: Workflow) -> None:
    step = _step(wf, runs_build)
    step["run"] = "echo nothing built"


def _drop_version_check(wf: Workflow) -> None:
    _job(wf)["steps"].remove(_step(wf, checks_version))


def _version_check_never_fails(wf: Workflow) -> None:
    step = _step(wf, checks_version)
    step["run"] = re.sub(r"exit [1-9]", "true", step["run"])


def _one_image_not_pushed(wf: Workflow) -> None:
    step = _step(wf, lambda s: pushes(s, IMAGE_NAMES[-1]))
    step["env"]["IMAGES"] = IMAGE_NAMES[0]


def _push_from_elsewhere(wf: Workflow) -> None:
    step = _step(wf, lambda s: pushes(s, IMAGE_NAMES[0]))
    step["run"] = step["run"].replace("oci-archive:.state/images/", "docker-daemon:")


def _push_without_preserving_digests(wf: Workflow) -> None:
    step = _step(wf, lambda s: pushes(s, IMAGE_NAMES[0]))
    step["run"] = step["run"].replace("--preserve-digests", "")


def _no_digest_comparison(wf: Workflow) -> None:
    _job(wf)["steps"].remove(_step(wf, compares_digests))


def _push_before_build(wf: Workflow) -> None:
    job_steps = _job(wf)["steps"]
    push = _step(wf, lambda s: pushes(s, IMAGE_NAMES[0]))
    job_steps.remove(push)
    job_steps.insert(0, push)


def _write_all_top(wf: Workflow) -> None:
    wf["permissions"] = "write-all"
    del _job(wf)["permissions"]


def _write_all_job(wf: Workflow) -> None:
    _job(wf)["permissions"] = "write-all"


def _contents_write(wf: Workflow) -> None:
    _job(wf)["permissions"] = {"contents": "write", "packages": "write"}


def _no_permissions(wf: Workflow) -> None:
    del wf["permissions"]
    del _job(wf)["permissions"]


def _ubuntu_host(wf: Workflow) -> None:
    del _job(wf)["container"]


def _unprivileged(wf: Workflow) -> None:
    _job(wf)["container"] = {"image": "debian:bookworm"}


def _action_by_tag(wf: Workflow) -> None:
    _step(wf, lambda s: "uses" in s)["uses"] = "actions/checkout@v4"


def _no_attestation(wf: Workflow) -> None:
    _job(wf)["steps"].remove(_step(wf, attests))


def _attest_without_permission(wf: Workflow) -> None:
    del _job(wf)["permissions"]["id-token"]


BREAKS: dict[str, tuple[Callable[[Workflow], None], str]] = {
    "no tag trigger": (_no_tags, "does not run on a pushed tag v*"),
    "other tags": (_other_tags, "does not run on a pushed tag v*"),
    "no build": (_no_build, "no step does a build by make images"),
    "no version check": (_drop_version_check, "no step does the tag/version check"),
    "a version check that cannot fail": (_version_check_never_fails, "no step does the tag/version check"),
    "one image not pushed": (_one_image_not_pushed, f"no step does a skopeo push of {IMAGE_NAMES[-1]}"),
    "pushed from elsewhere": (_push_from_elsewhere, f"no step does a skopeo push of {IMAGE_NAMES[0]}"),
    "digests not preserved": (_push_without_preserving_digests, f"no step does a skopeo push of {IMAGE_NAMES[0]}"),
    "no digest comparison": (_no_digest_comparison, "no step does a skopeo inspect"),
    "push before build": (_push_before_build, "out of order"),
    "write-all at the top": (_write_all_top, "the workflow's permissions are write-all"),
    "write-all in the job": (_write_all_job, "job images's permissions are write-all"),
    "contents write": (_contents_write, "job images may write the repository (contents: write)"),
    "no permissions": (_no_permissions, "job images declares no permissions"),
    "not in debian:bookworm": (_ubuntu_host, "does not build in a privileged debian:bookworm container"),
    "not privileged": (_unprivileged, "does not build in a privileged debian:bookworm container"),
    "an action by tag": (_action_by_tag, "actions/checkout@v4 is not pinned by a commit"),
    "no attestation": (_no_attestation, "no step attests the images' build provenance"),
    "attesting without the permission": (_attest_without_permission, "job images may not attest"),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_a_workflow_that_breaks_a_rule_is_refused(name: str) -> None:
    breaks, expected = BREAKS[name]
    wf = copy.deepcopy(load())
    breaks(wf)
    found = problems(wf)
    assert any(expected in p for p in found), found


def test_a_permission_to_write_packages_is_allowed() -> None:
    wf = copy.deepcopy(load())
    _job(wf)["permissions"] = {**_job(wf)["permissions"], "packages": "write"}
    assert problems(wf) == []

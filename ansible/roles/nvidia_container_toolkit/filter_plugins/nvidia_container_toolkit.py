"""The NVIDIA container toolkit's config edit and the GPU visibility verdict, for the nvidia_container_toolkit role.

The toolkit reads ``/etc/nvidia-container-runtime/config.toml`` (TOML) at every container create. The keys the role
sets live at the top level of that file, before its first table (``[nvidia-container-cli]`` ...). The edit changes
only those lines, keeps every other line (comments included) as it was, and is checked with ``tomllib``: the result
must parse to the original document with the locked keys set, or nothing is written.

The probes are ``ctr run ... ls -1 /dev`` in an unprivileged container: one that requests no GPU with
``NVIDIA_VISIBLE_DEVICES=all`` in its environment (as every CUDA base image sets it) must see no ``/dev/nvidia<N>``;
one given every GPU the way the device plugin gives them with ``DEVICE_LIST_STRATEGY=volume-mounts`` (a ``/dev/null``
mount under ``/var/run/nvidia-container-devices/``) must see all of the node's GPUs.
"""

from __future__ import annotations

import base64
import re
import tomllib
from typing import Any

#: What the toolkit does when a key is absent from its config (its built-in defaults), for the verdict's wording.
TOOLKIT_DEFAULTS: dict[str, bool] = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": True,
    "accept-nvidia-visible-devices-as-volume-mounts": False,
}

#: A table (``[t]``) or array-of-tables (``[[t]]``) header; only one that starts where a key/value may is real.
_HEADER = re.compile(r"^\s*\[")
_GPU_DEVICE = re.compile(r"^nvidia([0-9]+)$")
_CREATED_HEADER = (
    "# NVIDIA container toolkit settings. Written by gpucluster's nvidia_container_toolkit role, which found no file;\n"
    "# every key not set here keeps the toolkit's built-in default.\n"
)


def _toml(value: bool) -> str:
    return "true" if value else "false"


def _key_pattern(key: str) -> str:
    k = re.escape(key)
    return rf"(?:{k}|\"{k}\"|'{k}')"


def _top_level_end(lines: list[str]) -> int:
    """Index of the first table header line, or len(lines): where the top-level key/values end.

    A line starting with ``[`` is a header only where the text before it is a whole TOML document (not inside a
    multi-line array or string).
    """
    for i, line in enumerate(lines):
        if _HEADER.match(line):
            try:
                tomllib.loads("".join(lines[:i]))
            except tomllib.TOMLDecodeError:
                continue
            return i
    return len(lines)


def _set_top_level(lines: list[str], key: str, value: bool) -> list[str]:
    """``lines`` with top-level ``key = value``: the value replaced in place (a trailing comment kept), else the key
    inserted after its commented-out default (``#key = ...``), else after the last top-level line."""
    out = list(lines)
    end = _top_level_end(out)
    kp = _key_pattern(key)
    assign = re.compile(rf"^(\s*{kp}\s*=\s*)(true|false)(\s*(?:#.*)?)$")
    any_assign = re.compile(rf"^\s*{kp}\s*=")
    for i in range(end):
        body = out[i].rstrip("\r\n")
        eol = out[i][len(body) :]
        if m := assign.match(body):
            out[i] = f"{m.group(1)}{_toml(value)}{m.group(3)}{eol}"
            return out
        if any_assign.match(body):  # a value that is not a boolean: the whole line is replaced
            out[i] = f"{key} = {_toml(value)}" + (eol or "\n")
            return out
    new = f"{key} = {_toml(value)}\n"
    commented = re.compile(rf"^\s*#\s*{kp}\s*=")
    for i in range(end):
        if commented.match(out[i]):
            if not out[i].endswith("\n"):
                out[i] += "\n"
            out.insert(i + 1, new)
            return out
    pos = end
    while pos > 0 and (not out[pos - 1].strip() or out[pos - 1].lstrip().startswith("#")):
        pos -= 1
    if pos and not out[pos - 1].endswith("\n"):
        out[pos - 1] += "\n"
    out.insert(pos, new)
    if pos + 1 < len(out) and _HEADER.match(out[pos + 1]):
        out.insert(pos + 1, "\n")
    return out


def lock_config(text: str, settings: dict[str, bool]) -> str:
    """``text`` (a toolkit config.toml) with every key of ``settings`` set at the top level, every other line kept.

    Raises ValueError when ``text`` is not TOML or the edit would change anything else.
    """
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from exc
    for key, value in settings.items():
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be set to a boolean, not {value!r}")
    if not text.strip():
        return _CREATED_HEADER + "".join(f"{key} = {_toml(value)}\n" for key, value in settings.items())
    lines = text.splitlines(keepends=True)
    for key, value in settings.items():
        lines = _set_top_level(lines, key, value)
    result = "".join(lines)
    try:
        after = tomllib.loads(result)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"the edited file would not be valid TOML ({exc}); left unchanged") from exc
    if after != {**before, **settings}:
        raise ValueError("the edit would change more than the locked keys; left unchanged")
    return result


def toolkit_config_locked(slurped: dict[str, Any], settings: dict[str, bool], path: str) -> dict[str, Any]:
    """What the config step writes, from the ``slurp`` result of ``path`` (``failed_when: false``).

    ``{path, exists, before: {key: value or None}, content: new text or None, changed, error}``. A missing file
    counts as empty (the toolkit then runs on its built-in defaults); one that cannot be read or parsed gets
    ``error`` and no content, so nothing is written.
    """
    state: dict[str, Any] = {
        "path": path,
        "exists": False,
        "before": dict.fromkeys(settings),
        "content": None,
        "changed": False,
        "error": None,
    }
    if slurped.get("failed") or "content" not in slurped:
        msg = str(slurped.get("msg", "no content"))
        if "not found" not in msg.lower():
            state["error"] = f"cannot read {path}: {msg}"
            return state
        text = ""
    else:
        state["exists"] = True
        try:
            text = base64.b64decode(slurped["content"]).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            state["error"] = f"cannot read {path}: {exc}"
            return state
    try:
        state["content"] = lock_config(text, settings)
        doc = tomllib.loads(text)
        state["before"] = {key: doc.get(key) for key in settings}
    except ValueError as exc:  # TOMLDecodeError is one
        state["error"] = f"{path}: {exc}"
        return state
    state["changed"] = state["content"] != text
    return state


def gpu_devices(listing: str) -> list[str]:
    """The GPU device nodes (``/dev/nvidia<N>``, not nvidiactl or nvidia-uvm) in an ``ls -1 /dev`` listing."""
    found = [m for line in (listing or "").splitlines() if (m := _GPU_DEVICE.match(line.strip()))]
    return [f"/dev/nvidia{n}" for n in sorted({int(m.group(1)) for m in found})]


def _probe(result: dict[str, Any], what: str) -> tuple[list[str] | None, str | None]:
    """(GPU devices, None), or (None, why the probe says nothing)."""
    if result.get("rc", 0) != 0:
        err = (result.get("stderr") or result.get("msg") or "").strip().splitlines()
        return None, f"{what}: the probe container exited rc={result.get('rc')}: {err[-1] if err else 'no output'}"
    listing = result.get("stdout") or ""
    if "null" not in {line.strip() for line in listing.splitlines()}:
        return None, f"{what}: the probe printed no /dev listing: {listing.strip()[:200]!r}"
    return gpu_devices(listing), None


def _setting(key: str, value: Any) -> str:
    if value is None:
        return f"{key} unset (the toolkit's default, {_toml(TOOLKIT_DEFAULTS.get(key, False))})"
    return f"{key} = {_toml(value) if isinstance(value, bool) else repr(value)}"


def gpu_visibility_verdict(
    config: dict[str, Any],
    write: dict[str, Any],
    pull: dict[str, Any],
    unrequested: dict[str, Any],
    allocated: dict[str, Any],
    settings: dict[str, bool],
    expected_gpus: int,
    configure: bool,
) -> dict[str, Any]:
    """The node's verdict: the config step's outcome and both probes.

    ``config`` is :func:`toolkit_config_locked`'s result, ``write`` the registered ``copy`` that wrote it, ``pull``
    the image pull's; ``configure`` whether the role writes the config (false: the file is only audited, and a key
    that differs from ``settings`` fails the node).
    """
    path = config.get("path", "config.toml")
    before = config.get("before") or {}
    written = configure and not config.get("error") and not write.get("failed") and not write.get("skipped")
    # What the node's config holds once the role ran (the same on every run of a locked node: no before/after here).
    details: dict[str, Any] = {
        "config_path": path,
        "config": {key: settings[key] if written else before.get(key) for key in settings},
    }
    reasons: list[str] = []
    if config.get("error"):
        reasons.append(str(config["error"]))
    elif configure and write.get("failed"):
        reasons.append(f"writing {path} failed: {write.get('msg', 'no message')}")
    elif not configure:
        wrong = [key for key, value in settings.items() if before.get(key) is not value]
        reasons += [
            f"{path}: {_setting(key, before.get(key))}, must be {_toml(settings[key])}" for key in wrong
        ]
    if unrequested.get("skipped") or allocated.get("skipped"):
        if not reasons:
            return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
        return {"status": "fail", "reasons": reasons, "details": details}
    if not pull.get("skipped") and pull.get("rc", 0) != 0:
        err = (pull.get("stderr") or pull.get("msg") or "").strip().splitlines()
        reasons.append(f"pulling the probe image failed (rc={pull.get('rc')}): {err[-1] if err else 'no output'}")
    envvar_key = "accept-nvidia-visible-devices-envvar-when-unprivileged"
    mounts_key = "accept-nvidia-visible-devices-as-volume-mounts"
    seen, why = _probe(unrequested, "container requesting no GPU")
    if why:
        reasons.append(why)
    else:
        details["unrequested_devices"] = seen
        if seen:
            reasons.append(
                f"an unprivileged container that requests no GPU, with NVIDIA_VISIBLE_DEVICES=all, sees {len(seen)} "
                f"GPU(s): {', '.join(seen)} (the toolkit honours the variable; {path} must set "
                f"{envvar_key} = {_toml(settings.get(envvar_key, False))})"
            )
    seen, why = _probe(allocated, "container given every GPU by volume mounts")
    if why:
        reasons.append(why)
    else:
        details["allocated_devices"] = seen
        if len(seen or []) != expected_gpus:
            reasons.append(
                f"a container given every GPU the device plugin's way (DEVICE_LIST_STRATEGY=volume-mounts) sees "
                f"{len(seen or [])} GPU(s), not {expected_gpus}: {', '.join(seen or []) or 'none'} (pods that request "
                f"GPUs would not get them; {path} must set {mounts_key} = {_toml(settings.get(mounts_key, True))})"
            )
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


class FilterModule:
    """nvidia_container_toolkit filters."""

    def filters(self) -> dict[str, Any]:
        return {"toolkit_config_locked": toolkit_config_locked, "gpu_visibility_verdict": gpu_visibility_verdict}

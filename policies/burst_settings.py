"""The burst provider settings ConfigMap names secrets; it never holds one.

Provider API keys and kubeconfigs reach the provider container only as files of a Secret built from Pulumi secret
config. The settings (a ConfigMap, readable by anyone who may read ConfigMaps in the namespace, and shown in clear
in every preview) carry only the NAMES of those secrets (``apiKeySecret``, ``kubeconfigSecret``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from fnmatch import fnmatch
from typing import Any

import yaml
from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from contract.constants import CREDENTIAL_KEY_PATTERN, SETTINGS_LABEL
from policies.common import MANDATORY, Report, config_value, dig, labels_of, object_ref, schema

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
DEFAULT_CONFIG_MAPS = ["gpucluster-virtual-node-settings"]
#: Field names that would hold a credential itself.
_CREDENTIAL_KEY = re.compile(CREDENTIAL_KEY_PATTERN, re.IGNORECASE)
#: A field that names a secret ends in "Secret"; its value is a config key name such as runpodApiKey.
_SECRET_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
#: Text that is a credential whatever field it sits in.
_CREDENTIAL_VALUE = re.compile(
    r"(-----BEGIN [A-Z ]*(PRIVATE KEY|CERTIFICATE)-----|client-key-data|client-certificate-data|"
    r"^\s*token:\s*\S|\bBearer\s+\S{8,}|://[^/@\s:]+:[^/@\s]+@|\b(rpa|sk|ghp|xox[bp])[_-][A-Za-z0-9]{12,}|\bAKIA[0-9A-Z]{16})",
    re.MULTILINE,
)


def _looks_like_token(value: str) -> bool:
    """Long and full of digits: a generated key, not a name someone chose."""
    return len(value) >= 24 and sum(ch.isdigit() for ch in value) >= 4


def _walk(value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every (path, key, value) of a decoded document."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            yield sub, str(k), v
            yield from _walk(v, sub)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def settings_problems(document: Any) -> list[str]:
    """Credentials in a decoded settings document (empty when it only names secrets)."""
    problems = []
    for path, key, value in _walk(document):
        if key.endswith("Secret"):
            if not isinstance(value, str) or not _SECRET_NAME.match(value) or _looks_like_token(value):
                problems.append(f"{path} must be the NAME of a Pulumi secret config key, not a value")
            continue
        if _CREDENTIAL_KEY.search(key) and value not in (None, "", {}, []):
            problems.append(f"{path} holds a credential; name a Pulumi secret in {key}Secret instead")
        elif isinstance(value, str) and _CREDENTIAL_VALUE.search(value):
            problems.append(f"{path} carries credential material (a key, token or password in the text)")
    return problems


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    name = str(dig(args.props, "metadata", "name") or args.name)
    patterns = list(config_value(args.get_config(), "configMaps", DEFAULT_CONFIG_MAPS))
    labelled = labels_of(args.props).get(SETTINGS_LABEL) == "burst-provider"
    if args.resource_type != CONFIG_MAP or not (labelled or any(fnmatch(name, p) for p in patterns)):
        args.not_applicable("not the burst provider settings")
        return
    ref = object_ref(args.props, args.name)
    for key, text in (args.props.get("data") or {}).items():
        if not isinstance(text, str):
            continue
        for problem in settings_problems(_decode(text)):
            report(f"ConfigMap {ref} data.{key}: {problem}")


provider_secrets_not_in_config = ResourceValidationPolicy(
    name="provider-secrets-not-in-config",
    description="The burst provider settings ConfigMap names provider secrets and never contains one.",
    enforcement_level=MANDATORY,
    validate=_validate,
    config_schema=schema(
        configMaps={"type": "array", "items": {"type": "string"}, "default": DEFAULT_CONFIG_MAPS},
    ),
)

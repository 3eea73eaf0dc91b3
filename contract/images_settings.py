"""Stack-config section ``gpucluster:images``: where our own images come from, and which build a stack runs.

``make images`` builds exactly two images (images/README.md): :data:`DAEMONS_IMAGE`, every Python daemon of the
project (the console scripts in pyproject.toml), and :data:`VIRTUAL_NODE_IMAGE`, the Go virtual node. A stack names
them one way, ``<registry>/<name>:<version>``, and a stack that pins them adds ``@<digest>`` (prod does: the policy
``prod-images-by-digest`` refuses a tag alone there). The stack check fills every image field of ours that the stack
leaves unset from :meth:`ImagesSettings.ref`; an explicit ``image`` in a section still wins (a build under test).
Pure pydantic (no Pulumi): the daemons' settings models take their default image from here.

Example (stack YAML)::

    gpucluster:images:
      registry: registry.internal.example/gpucluster
      version: 0.1.0            # the project's version unless set
      digests:                  # written by make images PIN=<stack>
        gpucluster-daemons: sha256:<64 hex>
        gpucluster-virtual-node: sha256:<64 hex>
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from contract.issues import shown
from contract.model import ConfigModel

#: Every Python daemon of the project (the console scripts in pyproject.toml), one image.
DAEMONS_IMAGE = "gpucluster-daemons"
#: The Go virtual node (virtualnode/).
VIRTUAL_NODE_IMAGE = "gpucluster-virtual-node"
#: The images ``make images`` builds, in the order it builds them.
IMAGE_NAMES = (DAEMONS_IMAGE, VIRTUAL_NODE_IMAGE)
#: Where the images are pushed unless a stack says otherwise.
DEFAULT_REGISTRY = "ghcr.io/example"
#: The distribution this package is installed as.
DISTRIBUTION = "gpucluster"
#: pyproject.toml beside the package: the version when the package is run from a checkout, not installed.
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

# A registry host (DNS name or IP, optional port) and an optional repository path, lower-case as an image
# reference takes them (contract.model.check_image validates every ref built from it).
_HOST = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*(?::[0-9]{1,5})?"
_PATH_COMPONENT = r"[a-z0-9]+(?:[._-][a-z0-9]+)*"
_REGISTRY = re.compile(rf"^{_HOST}(?:/{_PATH_COMPONENT})*$")
#: An OCI tag (distribution spec): at most 128 characters, not starting with '.' or '-'.
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_MAX_REGISTRY = 255


@lru_cache(maxsize=1)
def project_version() -> str:
    """The project's version: the installed distribution's, else ``project.version`` of pyproject.toml beside the
    package (a checkout that was never installed). One place, so the images a stack runs follow the release."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        with PYPROJECT.open("rb") as fh:
            version = tomllib.load(fh)["project"]["version"]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise RuntimeError(
            f"no version of {DISTRIBUTION}: the distribution is not installed and {PYPROJECT} has no project.version "
            f"({type(exc).__name__})"
        ) from None
    if not isinstance(version, str):
        raise RuntimeError(f"{PYPROJECT}: project.version is not a string")
    return version


def check_registry(value: str) -> str:
    """A registry host with an optional path (``registry.internal.example/gpucluster``): no scheme, no tag or
    digest, no trailing slash. The image name is appended to it."""
    if "://" in value:
        raise ValueError(f"{shown(value)} has a scheme: give the registry host and path only, such as ghcr.io/example")
    if value.endswith("/"):
        raise ValueError(f"{shown(value)} ends with '/': the image name is appended after one, write it without")
    _host, _, path = value.partition("/")
    if "@" in value or ":" in path:
        raise ValueError(f"{shown(value)} carries a tag or digest: the version and digests are set on their own")
    if len(value) > _MAX_REGISTRY or not _REGISTRY.match(value):
        raise ValueError(
            f"{shown(value)} is not a registry host with an optional path such as registry.internal.example/gpucluster"
            " (lower-case)"
        )
    return value


def check_tag(value: str) -> str:
    """An OCI tag: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'; not ``latest``."""
    if not _TAG.match(value):
        raise ValueError(
            f"{shown(value)} is not an image tag (letters, digits, '_', '.' and '-', at most 128, not starting "
            "with '.' or '-')"
        )
    if value == "latest":
        raise ValueError("the moving tag 'latest' is refused: the version is a release")
    return value


def check_image_name(value: str) -> str:
    if value not in IMAGE_NAMES:
        raise ValueError(f"no image of ours is named {shown(value)} (known: {', '.join(IMAGE_NAMES)})")
    return value


def check_digest(value: str) -> str:
    if not _DIGEST.match(value):
        raise ValueError(f"{shown(value)} is not a digest such as sha256:<64 lower-case hex>")
    return value


Registry = Annotated[str, AfterValidator(check_registry)]
Tag = Annotated[str, AfterValidator(check_tag)]
ImageName = Annotated[str, AfterValidator(check_image_name)]
Digest = Annotated[str, AfterValidator(check_digest)]


class ImagesSettings(ConfigModel):
    """``gpucluster:images``: the registry, the version and the pinned digests of our two images."""

    registry: Registry = DEFAULT_REGISTRY
    version: Tag = Field(default_factory=project_version)
    #: Image name -> ``sha256:...``; written by ``make images PIN=<stack>``.
    digests: dict[ImageName, Digest] = Field(default_factory=dict)

    def ref(self, name: str) -> str:
        """``<registry>/<name>:<version>``, and ``@<digest>`` when the stack pins one."""
        check_image_name(name)
        ref = f"{self.registry}/{name}:{self.version}"
        digest = self.digests.get(name)
        return f"{ref}@{digest}" if digest else ref


def default_ref(name: str) -> str:
    """The image ``name`` as a stack without a ``gpucluster:images`` section runs it: the settings models' default."""
    return ImagesSettings().ref(name)


#: The daemons' image by the scheme's defaults (each daemon's settings model defaults to it).
DEFAULT_DAEMONS_IMAGE = default_ref(DAEMONS_IMAGE)
#: The virtual node's image by the scheme's defaults.
DEFAULT_VIRTUAL_NODE_IMAGE = default_ref(VIRTUAL_NODE_IMAGE)

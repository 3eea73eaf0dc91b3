"""Container image references: well formed (the grammar of ``distribution/reference``, which the kubelet and every
registry client parse by) and pinned (a tag other than ``latest``, or a digest).

One rule for every image the project sees: a researcher's job spec (``components/training/spec.py``) and every
workload the policy pack checks (``policies/images.py``).

Grammar (``github.com/distribution/reference``, ``regexp.go``): ``[domain/]path[:tag][@digest]`` where the domain
is a host name or IP with an optional port, each path component is lower-case letters and digits joined by ``.``,
``_``, ``__`` or dashes, a tag is 1-128 word characters, dots and dashes (not starting with either), and the whole
name is at most 255 characters.
"""

from __future__ import annotations

import re

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
_SHA256 = re.compile(r"@sha256:[0-9a-f]{64}$")
#: Longest name a reference may have (``NameTotalLengthMax``).
MAX_NAME = 255


def malformed(image: str) -> str | None:
    """Why ``image`` is not an image reference at all, or None."""
    if not image:
        return "is empty"
    m = _REFERENCE.match(image)
    if m is None:
        if image != image.strip() or any(c.isspace() for c in image):
            return "holds white space"
        if any(c in image for c in ";&|$`'\"\\<>(){}*?!#"):
            return "holds characters no image reference has (a shell's or a quote)"
        if image.lower() != image and _REFERENCE.match(image.lower()):
            return "has upper-case letters in its repository (references are lower case)"
        return "is not registry/name[:tag][@digest]"
    if len(m.group("name")) > MAX_NAME:
        return f"has a name longer than {MAX_NAME} characters"
    return None


def unpinned(image: str) -> str | None:
    """Why a well-formed ``image`` would float (no tag, or ``latest``), or None when it is pinned."""
    m = _REFERENCE.match(image)
    if m is None:
        return None
    if m.group("digest"):
        return None
    tag = m.group("tag")
    if tag is None:
        return "has no tag (it would float to latest)"
    if tag == "latest":
        return "uses the floating tag 'latest'"
    return None


def image_problem(image: str) -> str | None:
    """Why an image reference may not run here (malformed, or not pinned), or None."""
    return malformed(image) or unpinned(image)


def by_sha256(image: str) -> bool:
    """Pinned by a sha256 digest."""
    return bool(_SHA256.search(image))


def tag_of(image: str) -> tuple[str, str] | None:
    """``(name, tag)`` of a reference with a tag, the tag followed by ``@digest`` when it has one (what a chart that
    composes ``repository:tag`` takes); None without a tag or for a malformed reference."""
    m = _REFERENCE.match(image)
    if m is None or m.group("tag") is None:
        return None
    digest = m.group("digest")
    return m.group("name"), m.group("tag") + (f"@{digest}" if digest else "")

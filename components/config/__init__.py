"""The stack config: one validated model of a whole stack, and the offline checker for stack files.

A stack file (``stacks/Pulumi.<stack>.yaml``) holds its settings under ``config:`` as ``gpucluster:<key>``. The
same settings reach the program through the Pulumi engine at ``pulumi up``; both paths end in
:func:`parse_stack_config`, which either returns a :class:`StackConfig` or raises :class:`StackConfigError`
listing *every* problem it found, each with its key path, the offending value and why it is wrong. Nothing is
registered with the engine before the whole config is known to be valid.

* ``loader.py``: reading a stack file, Pulumi.yaml's defaults, the engine's config;
* ``stack.py``: :class:`StackConfig`, composed of each room's settings model (``components/*_settings.py``);
* ``rules.py``: the rules between sections, one function each, registered in ``RULES``;
* ``cli.py``: ``python -m components.config check stacks/Pulumi.prod.yaml [more files ...]``.
"""

from components.config.cli import main
from components.config.loader import (
    PROJECT_ROOT,
    from_pulumi_config,
    load_stack_file,
    parse_stack_config,
    project_defaults,
    read_stack_file,
)
from components.config.rules import RULES, Rule
from components.config.stack import BurstConfig, StackConfig, StackConfigError, StackSections
from contract.constants import PROJECT
from contract.issues import ConfigIssue

__all__ = [
    "PROJECT",
    "PROJECT_ROOT",
    "RULES",
    "BurstConfig",
    "ConfigIssue",
    "Rule",
    "StackConfig",
    "StackConfigError",
    "StackSections",
    "from_pulumi_config",
    "load_stack_file",
    "main",
    "parse_stack_config",
    "project_defaults",
    "read_stack_file",
]

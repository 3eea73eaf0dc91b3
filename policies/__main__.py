"""Entry point the Pulumi engine runs for `pulumi preview --policy-pack policies`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack

from policies import ALL_POLICIES

PolicyPack(name="gpucluster", enforcement_level=EnforcementLevel.MANDATORY, policies=ALL_POLICIES)

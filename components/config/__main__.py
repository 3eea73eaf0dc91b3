"""``python -m components.config check stacks/Pulumi.<stack>.yaml ...``"""

import sys

from components.config.cli import main

sys.exit(main())

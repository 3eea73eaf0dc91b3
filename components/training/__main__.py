"""``python -m components.training submit job.yaml``: the same command as the ``gpucluster`` console script."""

import sys

from components.training.submit import main

sys.exit(main())

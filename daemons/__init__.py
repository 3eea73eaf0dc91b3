"""Node daemons of the GPU cluster (one container image, one console script each)."""

"""The quota controller: every ClusterQueue's quota follows the GPUs that are really there (README.md)."""

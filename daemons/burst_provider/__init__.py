"""The burst provider service: runs the virtual node's pods on external GPU providers (see docs/burst-provider-api.md)."""

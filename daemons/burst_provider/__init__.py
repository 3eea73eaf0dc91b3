"""The burst provider service: runs the virtual node's pods on external GPU providers.

See docs/burst-provider-api.md for the API the Go virtual node calls.
"""

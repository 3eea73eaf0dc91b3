"""Another Kubernetes cluster as a burst provider (kind ``kubernetes``): each burst pod becomes one pod there.

- ``translate.py``: the source pod -> the target pod, and the ConfigMap and Secret copies it needs (pure).
- ``state.py``: a target pod's instance state and tags, the GPUs pods hold and nodes have free (pure).
- ``api.py``: the target cluster's API, as checked JSON, every failure a ProviderError.
- ``provider.py``: ``KubernetesClusterProvider``, which puts them together.
"""

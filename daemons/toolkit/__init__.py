"""What every daemon of the project shares, one concern per module.

- ``logs``: JSON (or plain) log lines on stderr, and a logger that reports each distinct problem once.
- ``listen``: ``HOST:PORT`` / ``:PORT`` / ``[IPv6]:PORT`` flags, with an error that names the flag.
- ``http``: the ``/metrics`` + ``/healthz`` server, with readiness and extra routes where a daemon needs them.
- ``shutdown``: SIGTERM/SIGINT to one stop event, and a drain of the stop steps within a deadline.
- ``lease``: leader election on a coordination.k8s.io/v1 Lease (client-go's rules), and the API errors
  (``KubeError``, ``ConflictError``) every Kubernetes call of the controllers raises.

Standard library, ``prometheus_client`` and (``lease`` only) the ``kubernetes`` client: nothing here imports a
daemon, the settings models or Pulumi.
"""

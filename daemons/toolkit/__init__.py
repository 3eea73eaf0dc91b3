"""What every daemon of the project shares, one concern per module.

- ``logs``: JSON (or plain) log lines on stderr, and a logger that reports each distinct problem once.
- ``listen``: ``HOST:PORT`` / ``:PORT`` / ``[IPv6]:PORT`` flags, with an error that names the flag.
- ``http``: the ``/metrics`` + ``/healthz`` server, with readiness and extra routes where a daemon needs them.
- ``shutdown``: SIGTERM/SIGINT to one stop event, and a drain of the stop steps within a deadline.
- ``kube``: the API errors every Kubernetes call raises (``KubeError``, ``ConflictError``) and the client's config;
  ``kube_api``: raw JSON calls on that client; ``lease``: leader election on a coordination.k8s.io/v1 Lease.
- ``prometheus``: the instant-query client that tells "the answer is N" from "there is no answer".
- ``events``: Event bodies and the RFC 3339 time they carry; ``taint``: a Node taint; ``rbac``: rules and grants
  as data.
- ``spec``: a controller declared once (``ControllerSpec``); ``runner``: the one command line that runs any spec;
  ``serve``: starting behind the Lease and serving until stopped; ``metrics``: the families every controller has;
  ``controller``: what every controller is (a replica with its loop, on the API or on Prometheus and the API) and
  how it writes its Events.
- ``cli``: the parser every daemon's command line starts from, and ``--log-level``.

Standard library, ``prometheus_client`` and the ``kubernetes`` client: nothing here imports a daemon, the settings
models or Pulumi (``tests/daemons/test_imports.py``).
"""

"""The fake GPU rental cloud the simulated cluster runs (``cloud_server``), and what it is built on (``_http``).

``cloud_server``: a rental cloud of our own with knobs (boot time, failure and death rates, prices, capacity), run as
its own process (``python -m daemons.burst_provider.fakes.cloud_server``) so its instances outlive a killed provider
service; the ``fake`` provider kind talks to it. It ships in the daemon image because it is a small standard-library
program of this package, but nothing in production starts it: only a stack whose providers include ``kind: fake``
points at one, and ``sim/processes.py`` is what runs it. The fake of RunPod's API, which only tests use, lives in
``tests/support/fake_runpod.py``.
"""

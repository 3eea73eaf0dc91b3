"""The fake providers the simulated cluster runs: the fake GPU cloud (``cloud_server``), the fake of RunPod's API
(``runpod_server``, with RunPod's document and rules in ``runpod_contract``), and what they are built on
(``_http``).

``cloud_server``: a rental cloud of our own with knobs (boot time, failure and death rates, prices, capacity), run as
its own process (``python -m daemons.burst_provider.fakes.cloud_server``) so its instances outlive a killed provider
service; the ``fake`` provider kind talks to it. ``runpod_server``: RunPod's REST API v2 as its OpenAPI document
states it, with a knob per refusal, run by the tests in-process and by the simulated cluster as its own process
(``python -m daemons.burst_provider.fakes.runpod_server``) for a ``runpod`` provider on loopback. Both ship in the
daemon image because they are small programs of this package, but nothing in production starts them: only a stack
whose providers point at one on loopback (``sim/processes.py`` runs them) uses them. ``runpod_server`` validates
creates with the dev dependencies and the document kept under ``tests/fixtures/runpod/``, so it runs from a
checkout; importing it needs neither.
"""

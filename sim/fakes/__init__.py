"""The fake providers the simulated cluster runs: the fake GPU cloud (``cloud_server``), the fake of RunPod's API
(``runpod_server``, with RunPod's document and rules in ``runpod_contract``), and what they are built on
(``_http``).

``cloud_server``: a rental cloud of our own with knobs (boot time, failure and death rates, prices, capacity), run as
its own process (``python -m sim.fakes.cloud_server``) so its instances outlive a killed provider
service; the ``fake`` provider kind talks to it. ``runpod_server``: RunPod's REST API v2 as its OpenAPI document
states it, with a knob per refusal, run by the tests in-process and by the simulated cluster as its own process
(``python -m sim.fakes.runpod_cli``) for a ``runpod`` provider on loopback. They are the
simulated cluster's, not production's: they stand outside the cluster as the providers do, started by
``sim/outside.py`` before the stack is deployed, and they are not in the daemon image (its wheel holds
``components``, ``policies`` and ``daemons`` only). ``runpod_server`` validates
creates with the dev dependencies and the document kept under ``tests/fixtures/runpod/``, so it runs from a
checkout; importing it needs neither.
"""

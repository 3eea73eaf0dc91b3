"""Stand-ins for rented-GPU clouds, for tests, the simulated cluster and benchmarks.

- ``runpod_server``: speaks RunPod's REST API v1 (same paths, fields, status codes), to test the RunPod adapter.
- ``cloud_server``: a rental cloud of our own with knobs (boot time, failure and death rates, prices, capacity), run
  as its own process so its instances outlive a killed provider service.
"""

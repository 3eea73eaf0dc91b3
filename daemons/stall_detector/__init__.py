"""The stall detector: a training gang whose GPUs, fabric and progress all fall silent for ``stallAfter`` is
stalled. ``decide.py`` holds the pure verdict; the controller around it is not deployed yet."""

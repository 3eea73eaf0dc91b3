"""One module per controller of ours: its :class:`~contract.spec.ControllerSpec` (``SPEC``), the settings it reads
and the RBAC rules it is granted, with the names its daemon and the stack share. ``contract.registry`` lists them."""

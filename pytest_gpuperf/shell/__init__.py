"""The pytest side (ring 3), which ``pytest_gpuperf.plugin`` delegates to; nothing in the core,
the device adapters or the CLI imports it."""

"""The collectors of evidence (device adapters). They import no pytest module: what a
collector needs (settings, a way to re-run the test) comes in its ``CaptureContext``."""

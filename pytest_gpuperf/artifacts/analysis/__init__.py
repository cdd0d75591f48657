"""Pure analysis of captured evidence (core ring: no torch, no pytest): profiler timelines,
kernel inventories and their diff, the diagnosis, and the capture folders and manifest."""

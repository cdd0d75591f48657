"""Pure analysis of captured evidence (core ring: no torch, no pytest): profiler
timelines (:mod:`.timeline`), kernel inventories and their diff (:mod:`.inventory`),
the diagnosis (:mod:`.diagnose`), and the folders and manifest (:mod:`.layout`).
"""

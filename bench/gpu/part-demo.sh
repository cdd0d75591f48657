#!/usr/bin/env bash
# `pytest-gpuperf demo` from an empty folder (step 2 passes, step 3 fails the planted
# benchmark): gate-b's demo step alone, for acceptance.sh's plans. DEMO_N: the demos to run,
# each from its own empty folder ("1 2": two; default one).
steps=""
for n in ${DEMO_N:-1}; do steps="$steps demo$n"; done
GATE_B_STEPS=${steps# } exec bash "$(dirname "$0")/part-gate-b.sh"

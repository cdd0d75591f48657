#!/usr/bin/env bash
# `pytest-gpuperf demo` once from an empty folder (step 2 passes, step 3 fails the planted
# benchmark): gate-b's demo step alone, for the one-call plan of acceptance.sh. Run the plan
# again for the next demo; the summaries of the calls are put side by side.
GATE_B_STEPS=demo${DEMO_N:-1} exec bash "$(dirname "$0")/part-gate-b.sh"

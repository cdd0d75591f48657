#!/usr/bin/env bash
# The README's examples saved 3 times from an empty store, then compared unchanged (no failure;
# the compare at most 1.5x a save's time): gate-b's examples step alone, for acceptance.sh's plans.
GATE_B_STEPS=examples${EXAMPLES_N:-1} exec bash "$(dirname "$0")/part-gate-b.sh"

#!/usr/bin/env bash
# The README's examples saved 3 times from an empty store, then compared unchanged (no failure;
# the compare at most 1.5x a save's time): gate-b's examples step alone, for acceptance.sh's plans.
# EXAMPLES_N: the rounds to run, each from an empty store ("1 2": two rounds; default one).
steps=""
for n in ${EXAMPLES_N:-1}; do steps="$steps examples$n"; done
GATE_B_STEPS=${steps# } exec bash "$(dirname "$0")/part-gate-b.sh"

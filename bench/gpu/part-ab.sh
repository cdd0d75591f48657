#!/usr/bin/env bash
# --gpuperf-ab=HEAD~1 on the zoo's host-bound cases (a two-commit fixture, the slowdown in code):
# gate-b's first step alone, for the one-call plan of acceptance.sh.
GATE_B_STEPS=ab exec bash "$(dirname "$0")/part-gate-b.sh"

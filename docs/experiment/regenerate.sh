#!/usr/bin/env bash
# Regenerates every report under docs/experiment/ (run from the repository root). Each line is
# the command printed at the top of its report; JSON results go to out/experiment/ (not kept).
# The whole set took 41 CPU-minutes on one core (page-by-page pool): four units for
# tau-bench, three for BFCL, and the load sweep only in the three reports that carry one.
# ONLY=name[,name...] runs only those reports (they are independent and can run in parallel).
set -euo pipefail
D=docs/experiment
J=out/experiment
Q35='tau-bench airline × Qwen3.5 (thinking on, reasoning dropped from history)'
Q36='tau-bench airline × Qwen3.6 with preserve_thinking (reasoning kept)'
BF='BFCL v4 multi-turn (base) × Qwen3.5 (thinking on, reasoning kept in history)'
P36=(--family qwen3_6 --template-kwargs '{"preserve_thinking": true}' --client kept)
TAU_UNITS=(--unit 16 --unit 1 --unit 64 --unit 1056)
BF_UNITS=(--unit 16 --unit 1 --unit 1056)
LOAD=(--load-concurrency 16 --load-concurrency 64 --load-concurrency 256
      --load-capacity-gib 8 --load-capacity-gib 32 --load-capacity-gib 64)
only=",${ONLY:-all},"
run() { [[ $only == ",all," || $only == *",$1,"* ]] && shift && boundary experiment "$@"; return 0; }

run q35-shared --workload tau_bench --family qwen3_5 "${TAU_UNITS[@]}" "${LOAD[@]}" --load-concurrency 512 \
    --json $J/tau-bench-qwen3_5-dropped-shared.json --report $D/tau-bench-qwen3_5-dropped-shared.md \
    --title "$Q35, shared system prompt"
run q35-per-session --workload tau_bench --family qwen3_5 --system-prompt per_session "${TAU_UNITS[@]}" \
    --json $J/tau-bench-qwen3_5-dropped-per-session.json --report $D/tau-bench-qwen3_5-dropped-per-session.md \
    --title "$Q35, per-session system prompts"
run q36-shared "${P36[@]}" --workload tau_bench "${TAU_UNITS[@]}" "${LOAD[@]}" \
    --json $J/tau-bench-qwen3_6-preserve-shared.json --report $D/tau-bench-qwen3_6-preserve-shared.md \
    --title "$Q36, shared system prompt"
run q36-per-session "${P36[@]}" --workload tau_bench --system-prompt per_session "${TAU_UNITS[@]}" \
    --json $J/tau-bench-qwen3_6-preserve-per-session.json --report $D/tau-bench-qwen3_6-preserve-per-session.md \
    --title "$Q36, per-session system prompts"
run q36-unit "${P36[@]}" --workload tau_bench --decode-states unit "${TAU_UNITS[@]}" \
    --json $J/tau-bench-qwen3_6-preserve-shared-unit-decode-states.json \
    --report $D/tau-bench-qwen3_6-preserve-shared-unit-decode-states.md \
    --title "$Q36, shared system prompt, output-side states at unit boundaries"
run bfcl --workload bfcl --family qwen3_5 --client kept "${BF_UNITS[@]}" \
    --json $J/bfcl-qwen3_5-kept-shared.json --report $D/bfcl-qwen3_5-kept-shared.md --title "$BF"
run bfcl-unit --workload bfcl --family qwen3_5 --client kept --decode-states unit "${BF_UNITS[@]}" "${LOAD[@]}" \
    --json $J/bfcl-qwen3_5-kept-shared-unit-decode-states.json \
    --report $D/bfcl-qwen3_5-kept-shared-unit-decode-states.md \
    --title "$BF, output-side states at unit boundaries"

#!/usr/bin/env bash
# usage: bench.sh ROUNDS NAME=DIR... ; prints one line per (round, binary)
set -u
M=${M:-$HOME/.cache/endor/serve/smollm2-int8_50.endor}
P8=${P8:-prompts8.txt}
rounds=$1; shift
echo "# $(lscpu | grep 'Model name' | sed 's/  */ /g'); $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for nb in "$@"; do
    name=${nb%%=*}; bin=${nb#*=}/endor-infer
    b8=$("$bin" "$M" --prompts "$P8" --batch 8 -n 128 --threads 2 --stats --temperature 0 --ignore-eos 2>&1 | sed -n 's/.*decode-only steps, \([0-9.]*\) ms each.*/\1/p')
    b1=$("$bin" "$M" -p 'The capital of France is' -n 256 --threads 2 --stats --temperature 0 --ignore-eos 2>&1 | sed -n 's/^decode: .*(\([0-9.]*\) tokens\/s).*/\1/p')
    l1=$("$bin" "$M" -p 'The capital of France is' -n 1000 --threads 2 --stats --temperature 0 --ignore-eos 2>&1 | sed -n 's/^decode: .*(\([0-9.]*\) tokens\/s).*/\1/p')
    echo "round $r $name b8_step_ms $b8 b8_tok_s $(awk "BEGIN{printf \"%.1f\", 8000/$b8}") b1_n256_tok_s $b1 b1_n1000_tok_s $l1 load $(cut -d' ' -f1 /proc/loadavg)"
  done
done

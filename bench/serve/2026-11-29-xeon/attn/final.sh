#!/usr/bin/env bash
cd "$(dirname "$0")"
echo "== quiet"
./bench.sh 3 main="$1" branch="$2"
echo "== busy: timeout 200 nice -n 10 taskset -c 1 sh -c 'while :; do :; done' beside"
timeout 200 nice -n 10 taskset -c 1 sh -c 'while :; do :; done' &
bp=$!
sleep 1
./bench.sh 1 main="$1" branch="$2"
kill $bp 2>/dev/null; wait $bp 2>/dev/null
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"

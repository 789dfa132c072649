#!/usr/bin/env python3
"""Innermost loops of a GCC assembly file (-S, AT&T), as llvm-mca input blocks.

Usage: extract_loops.py FILE.s OUT_DIR NAME=FUNC_SUBSTRING:EXPANDS:DPBUSD ...
For each NAME it picks, in the first function whose demangled name contains FUNC_SUBSTRING (a
function, not a lambda), the first innermost loop (a label reached by a later backward jump with no
other such loop inside it) holding exactly EXPANDS vpexpandb and DPBUSD vpdpbusd, and writes its
instructions to OUT_DIR/NAME.s. Exits 1 naming the block it could not find: a compiler or kernel
change then needs new counts here rather than a silently wrong block.
"""
import re
import subprocess
import sys

JUMP = re.compile(r'\s+j\w+\s+(\.L\w+)\s*$')


def functions(lines):
    name, start = None, 0
    for i, line in enumerate(lines):
        m = re.match(r'\s*\.type\s+(\S+),\s*@function', line)
        if m:
            if name:
                yield name, start, i
            name, start = m.group(1), i
    if name:
        yield name, start, len(lines)


def loops(lines, lo, hi):
    labels, found = {}, []
    for i in range(lo, hi):
        m = re.match(r'^(\.L\w+):', lines[i])
        if m:
            labels[m.group(1)] = i
        m = JUMP.match(lines[i])
        if m and m.group(1) in labels:
            found.append((labels[m.group(1)], i))
    return [(s, e) for s, e in found if not any(s < s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in found)]


def body(lines, s, e):
    return [l.strip() for l in lines[s + 1:e + 1] if l.startswith('\t') and not l.startswith('\t.')]


def main():
    path, out = sys.argv[1], sys.argv[2]
    lines = open(path).read().split('\n')
    funcs = list(functions(lines))
    names = subprocess.run(['c++filt'], input='\n'.join(f[0] for f in funcs), capture_output=True, text=True).stdout.split('\n')
    for spec in sys.argv[3:]:
        name, rest = spec.split('=', 1)
        sub, n_exp, n_dp = rest.rsplit(':', 2)
        block = None
        for (sym, lo, hi), demangled in zip(funcs, names):
            if sub not in demangled or demangled.startswith('auto '):
                continue
            for s, e in loops(lines, lo, hi):
                b = body(lines, s, e)
                if sum('vpexpandb' in x for x in b) == int(n_exp) and sum('vpdpbusd' in x for x in b) == int(n_dp):
                    block = (demangled, lines[s].rstrip(':'), b)
                    break
            if block:
                break
        if not block:
            sys.exit(f'{path}: no innermost loop with {n_exp} vpexpandb and {n_dp} vpdpbusd in {sub} (block {name})')
        with open(f'{out}/{name}.s', 'w') as f:
            f.write(f'# {name}: loop {block[1]} of {block[0][:160]}\n')
            f.write('\n'.join(block[2]) + '\n')
        print(f'{name}: {len(block[2])} instructions, loop {block[1]} of {block[0][:100]}')


main()

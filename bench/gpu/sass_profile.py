#!/usr/bin/env python3
"""Instruction counts of the 16-byte fused kernels' loops, from `cuobjdump -sass` text.

sass_profile.py SASS_TXT RES_USAGE_TXT > profile.json

For every instantiation of dense16_kernel and bitmap16_kernel (kernels/cuda/fused_linear16.cu) it
finds the loops by their backward branches and reports, per warp (one SASS instruction = one issue
slot of a warp scheduler):
  dense16:  main_loop (instructions of the chunk loop body, which handles 2 chunks of each of the
            block's rows per thread), per_chunk = main_loop / (2·rows), outside (prologue and
            reduction, once per warp).
  bitmap16: step (the 1024-column step loop: everything but the two regions below), x_loop (the
            body of the x-tile staging loop, run kMaxT·256/(32·warps) times a step), chunk_blocks
            (the instructions of each guarded block that decodes one 16-byte chunk into shared
            memory; a warp runs as many as its busiest lane has chunks), compute (the 32-column
            walk), outside.
Registers and shared memory come from `cuobjdump -res-usage`.
"""
import json
import re
import sys

TYPES = {'0': 'f16', '1': 'bf16', '2': 'f32', '3': 'int8', '4': 'int4', '5': 'int8g'}


def parse_functions(text):
    funcs, name, body = {}, None, []
    for line in text.split('\n'):
        m = re.search(r'Function : (\S+)', line)
        if m:
            if name:
                funcs[name] = body
            name, body = m.group(1), []
            continue
        m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\* 0x', line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2).rstrip(' ;')))
    if name:
        funcs[name] = body
    return funcs


def describe(mangled):
    m = re.search(r'(dense16|bitmap16)_kernelILNS1_6ValuesE(\d)E(.*?)EEEv', mangled)
    if not m:
        return None
    kind, vt, rest = m.group(1), TYPES[m.group(2)], m.group(3)
    ints = [int(v) for v in re.findall(r'Li(\d+)E', rest)]
    bools = [v == '1' for v in re.findall(r'Lb(\d)E?', rest)]
    if kind == 'dense16':
        # int4k: the instance for int4k's coded parameters (a template parameter since 2026-11-27)
        return {'kernel': kind, 'values': vt, 'rows': ints[0], 'max_tokens': ints[1], 'vec': bools[0],
                'int4k': len(bools) > 1 and bools[1]}
    return {'kernel': kind, 'values': vt, 'max_tokens': ints[0], 'uniform_groups': bools[0]}


def branches(body):
    out = []
    for i, (addr, ins) in enumerate(body):
        m = re.search(r'\bBRA\s+(?:!?U?P\d,\s*)?(?:`\()?0x([0-9a-f]+)', ins)
        if m:
            out.append((i, addr, int(m.group(1), 16)))
    return out


def index_of(body, addr):
    for i, (a, _) in enumerate(body):
        if a == addr:
            return i
    raise ValueError('no instruction at 0x%x' % addr)


def op(ins):
    """The instruction without its predicate guard (@P0, @!P1)."""
    return ins.split(' ', 1)[1] if ins.startswith('@') else ins


def real(ins_list):
    """Instructions that take an issue slot (NOPs pad the end; the self-branch ends the code)."""
    return [x for x in ins_list if not x[1].startswith('NOP')]


def profile_dense(body, info):
    back = [(i, a, t) for i, a, t in branches(body) if t < a]
    i_br, a_br, t = max(back, key=lambda b: b[1] - b[2])
    loop = real(body[index_of(body, t):i_br + 1])
    total = len(real(body))
    info.update({'main_loop': len(loop), 'per_chunk': len(loop) / (2.0 * info['rows']),
                 'outside': total - len(loop), 'total': total})


def profile_bitmap(body, info):
    bars = [i for i, (_, ins) in enumerate(body) if ins.startswith('BAR.SYNC')]
    back = [(i, a, t) for i, a, t in branches(body) if t < a]
    i_br, a_br, t = max(back, key=lambda b: b[1] - b[2])  # the step loop
    i_top = index_of(body, t)
    bar1, bar2 = [b for b in bars if i_top <= b <= i_br][:2]
    # x staging between the barriers: the float4 loop (whole steps) and the scalar one (a row's
    # last, partial step, or an unaligned x: not counted a step)
    x_fast = x_slow = 0
    loops = []
    for i, a, tt in back:
        j = index_of(body, tt)
        if bar1 < j < i < bar2:
            loops.append((j, i))
            n = len(real(body[j:i + 1]))
            if any(op(ins).startswith('LDG.E.128') for _, ins in body[j:i + 1]):
                x_fast = n
            else:
                x_slow += n
    # the partial-step path: the first branch after bar1 that jumps over it to (just before) the
    # float4 loop
    fast = [(j, i) for j, i in loops if any(op(ins).startswith('LDG.E.128') for _, ins in body[j:i + 1])]
    if fast:
        top = fast[0][0]
        for i, a, tt in branches(body):
            if bar1 < i < top and tt > a and top - 8 <= index_of(body, tt) <= top:
                x_slow = len(real(body[i + 1:index_of(body, tt)]))
                break
    # chunk blocks: innermost guarded regions between the barriers that store to shared memory
    # and load nothing from global memory (the decode of one 16-byte chunk held in registers)
    spans = []
    for i, a, tt in branches(body):
        if bar1 < i < bar2 and tt > a:
            j = index_of(body, tt)
            blk = body[i + 1:j]
            if (j <= bar2 + 1 and any(op(ins).startswith('STS') for _, ins in blk)
                    and not any(op(ins).startswith('LDG') for _, ins in blk)
                    and not any(lj <= i < li or i < lj < j for lj, li in loops)):
                spans.append((i, j))
    inner_spans = [(i, j) for i, j in spans if not any(i < i2 and j2 <= j for i2, j2 in spans if (i2, j2) != (i, j))]
    blocks = [len(real(body[i + 1:j])) for i, j in inner_spans]
    # compute: the forward branch after bar2 that skips the walk of an idle warp
    fwd = [(i, a, tt) for i, a, tt in branches(body) if bar2 < i < i_br and tt > a]
    i_c, a_c, t_c = max(fwd, key=lambda b: b[2] - b[1])
    compute = len(real(body[i_c + 1:index_of(body, t_c)]))
    step_total = len(real(body[i_top:i_br + 1]))
    total = len(real(body))
    info.update({'step_total': step_total, 'x_loop': x_fast, 'x_loop_partial_step': x_slow, 'chunk_blocks': blocks,
                 'compute': compute, 'step_fixed': step_total - x_fast - x_slow - sum(blocks) - compute,
                 'outside': total - step_total, 'total': total})


def res_usage(text):
    out = {}
    name = None
    for line in text.split('\n'):
        m = re.search(r'Function (\S+):', line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r'REG:(\d+).*?SHARED:(\d+)', line)
        if m and name:
            out[name] = {'registers': int(m.group(1)), 'shared_bytes': int(m.group(2))}
            name = None
    return out


def main():
    sass = open(sys.argv[1]).read()
    res = res_usage(open(sys.argv[2]).read()) if len(sys.argv) > 2 else {}
    out = []
    for name, body in parse_functions(sass).items():
        info = describe(name)
        if not info:
            continue
        info.update(res.get(name, {}))
        if info['kernel'] == 'dense16':
            if info['vec']:
                profile_dense(body, info)
            else:
                info['total'] = len(real(body))
        else:
            profile_bitmap(body, info)
        out.append(info)
    out.sort(key=lambda d: (d['kernel'], d['values'], d['max_tokens'], str(d)))
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == '__main__':
    main()

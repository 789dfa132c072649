#!/usr/bin/env python3
"""Speed of light of the 16-byte fused kernels (kernels/cuda/fused_linear16.cu) without a GPU.

sol.py PROFILE_JSON [--json PREDICTED_JSON] > tables.md

PROFILE_JSON: bench/gpu/sass_profile.py's instruction counts of the sm_90 build. For every kernel,
shape and sparsity of issue 26 it prints, on an H100 SXM (132 SMs, 3.35 TB/s HBM3) and an H200
(132 SMs, 4.8 TB/s HBM3e), the bounds the kernel meets and the time it should take:

  t_mem    stored bytes / the device-to-device copy rate (read + write bytes a second: the rate the
           issue measures against; 4240 GB/s measured on the H200 2026-11-26, 0.883 of its
           4.8 TB/s; the H100 is assumed to reach the same 0.883 of 3.35 TB/s: 2959 GB/s).
  t_issue  warp instructions the kernel issues (SASS counts × the shape's loop trip counts) /
           (132 SMs × 4 schedulers × 1.98 GHz × 0.85 sustained issue efficiency).
  t_lat    Little's law: stored bytes / (132 × bytes in flight per SM / 0.8 µs loaded DRAM latency).
  predict  max(t_mem, t_issue, t_lat) + 2 µs (a launch in a stream of back-to-back launches:
           grid ramp-up and drain). bench_fused16 measures the same quantity ("us").

Everything here is an assumption the device run (bench/gpu/device.sh) checks.
"""
import argparse
import json
import math
import sys

DEVICES = {
    'H100': {'hbm_gbps': 3350.0, 'copy_gbps': 3350.0 * 4240.0 / 4800.0},
    'H200': {'hbm_gbps': 4800.0, 'copy_gbps': 4240.0},
}
SMS, SCHEDULERS, CLOCK_HZ, ISSUE_EFF = 132, 4, 1.98e9, 0.85
LATENCY_S, LAUNCH_S = 0.8e-6, 2.0e-6
REGS_PER_SM, SMEM_PER_SM, SMEM_RESERVED, MAX_WARPS, MAX_BLOCKS = 65536, 228 * 1024, 1024, 64, 32
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (128256, 4096)]
BITS = {'f16': 16, 'bf16': 16, 'f32': 32, 'int8': 8, 'int4': 4, 'int8g': 8}
STEP_COLS = 1024
GROUP = 128        # int4's group in the table (g128)
GROUP_INT8G = 32   # int8g's (llama.cpp's Q8_0 grid)


def align16(n):
    return (n + 15) // 16 * 16


def stored_bytes(rows, cols, layout, values, sparsity):
    """The blob size of SPEC.md §6.2 (sections 16-byte aligned)."""
    if layout == 'bitmap':
        nnz = round((1.0 - sparsity) * rows * cols)
        sections = [rows * math.ceil(cols / 64) * 8, rows * math.ceil(cols / 4096) * 4]
    else:
        nnz = rows * cols
        sections = []
    sections.append((nnz + 1) // 2 if values == 'int4' else nnz * BITS[values] // 8)
    if values == 'int8':
        sections.append(4 * rows)
    if values == 'int4':
        sections += [2 * rows * math.ceil(cols / GROUP)] * 2
    if values == 'int8g':
        sections.append(2 * rows * math.ceil(cols / GROUP_INT8G))
    return sum(align16(s) for s in sections)


def occupancy(regs, threads, smem):
    """Resident warps per SM (registers allocated in units of 8 a thread, 256 a warp)."""
    regs_warp = math.ceil(regs / 8) * 8 * 32
    warps = threads // 32
    by_regs = (REGS_PER_SM // regs_warp) // warps
    by_smem = SMEM_PER_SM // (smem + SMEM_RESERVED)
    by_warps = MAX_WARPS // warps
    blocks = min(by_regs, by_smem, by_warps, MAX_BLOCKS)
    return blocks, blocks * warps


def find(profile, **kw):
    for p in profile:
        if all(p.get(k) == v for k, v in kw.items()):
            return p
    raise KeyError(kw)


def dense_model(p, rows, cols, values):
    chunk_cols = 128 // BITS[values]
    n_chunks = cols // chunk_cols
    threads = min(256, max(32, (n_chunks + 31) // 32 * 32))
    blocks = math.ceil(rows / p['rows'])
    # A loop iteration handles chunks k and k + threads of each row; the second half is skipped
    # (break) past the row's last chunk: a warp runs main_loop/2 per chunk position it has.
    per_block = 0
    for w in range(threads // 32):
        positions = max(0, math.ceil((n_chunks - 32 * w) / threads))
        per_block += p['outside'] + positions * p['main_loop'] / 2
    warp_instr = blocks * per_block
    _, warps_sm = occupancy(p['registers'], threads, p['shared_bytes'])
    # In flight: every thread's 2·rows chunk loads of one iteration.
    inflight = warps_sm * 32 * 2 * p['rows'] * 16
    per16 = p['per_chunk']
    return warp_instr, warps_sm, inflight, per16, threads


def bitmap_model(p, rows, cols, values, sparsity, tokens=1):
    warps = 8 if tokens <= 2 else 4 if tokens <= 4 else 2
    vals = STEP_COLS * (1.0 - sparsity)
    span = math.ceil(vals * BITS[values] / 128) + 1            # 16-byte chunks a step's values touch
    blocks_run = min(len(p['chunk_blocks']), math.ceil(span / 32))
    chunk = sum(p['chunk_blocks'][:blocks_run])
    x_iters = math.ceil(tokens * STEP_COLS / 4 / (warps * 32))
    whole = cols // STEP_COLS
    partial = 1 if cols % STEP_COLS else 0
    n_step = p['step_fixed'] + p['x_loop'] * x_iters + p['compute'] + chunk
    n_partial = p['step_fixed'] + p['x_loop_partial_step'] + p['compute'] + chunk
    warp_instr = rows * (whole * n_step + partial * n_partial + p['outside'])
    _, warps_sm = occupancy(p['registers'], warps * 32, p['shared_bytes'])
    step_bytes = STEP_COLS / 8 + span * 16                    # mask + chunks of the next step in flight
    inflight = warps_sm * step_bytes
    per16 = n_step * 32 / (STEP_COLS * (1 / 8 + (1.0 - sparsity) * BITS[values] / 8) / 16)
    return warp_instr, warps_sm, inflight, per16, warps * 32


def predict(kind, p, rows, cols, layout, values, sparsity, dev):
    nbytes = stored_bytes(rows, cols, layout, values, sparsity)
    if layout == 'dense':
        warp_instr, warps_sm, inflight, per16, threads = dense_model(p, rows, cols, values)
    else:
        warp_instr, warps_sm, inflight, per16, threads = bitmap_model(p, rows, cols, values, sparsity)
        nbytes_read = nbytes + rows * math.ceil(cols / STEP_COLS) * 16  # a chunk read twice a step boundary
    copy = DEVICES[dev]['copy_gbps'] * 1e9
    t_mem = nbytes / copy
    t_issue = warp_instr / (SMS * SCHEDULERS * CLOCK_HZ * ISSUE_EFF)
    t_lat = nbytes / (SMS * inflight / LATENCY_S)
    bound = max(t_mem, t_issue, t_lat)
    limit = 'memory' if bound == t_mem else 'issue' if bound == t_issue else 'latency'
    t = bound + LAUNCH_S
    return {'bytes': nbytes, 't_mem_us': t_mem * 1e6, 't_issue_us': t_issue * 1e6, 't_lat_us': t_lat * 1e6,
            'predicted_us': t * 1e6, 'limit': limit, 'pct_copy': 100.0 * (nbytes / t) / copy,
            'warps_per_sm': warps_sm, 'inflight_kb': inflight / 1024, 'instr_per_16b': per16, 'threads': threads}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('profile')
    ap.add_argument('--json')
    a = ap.parse_args()
    profile = json.load(open(a.profile))
    forms = [('bitmap', v, s) for s in (0.5, 0.7) for v in ('f16', 'bf16', 'int8', 'int4')]
    forms.insert(4, ('bitmap', 'int8g', 0.5))  # int8g g32: the forms bench_fused16 measures
    forms += [('dense', v, 0.0) for v in ('f16', 'bf16', 'int8', 'int4', 'int8g')]
    out = []
    print('### Per kernel (T = 1): instructions, registers, occupancy, bytes in flight\n')
    print('| kernel | values | sparsity | SASS instr. / 16 B of weights | registers | threads/block | '
          'warps/SM | bytes in flight/SM | issue-bound GB/s (H100/H200 clock) |')
    print('|---|---|---|---|---|---|---|---|---|')
    for layout, v, s in forms:
        if layout == 'dense':
            p = find(profile, kernel='dense16', values=v, max_tokens=1, vec=True, int4k=False)
        else:
            p = find(profile, kernel='bitmap16', values=v, max_tokens=1, uniform_groups=True)
        r = predict(layout, p, 11008, 4096, layout, v, s, 'H200')
        issue_gbps = r['bytes'] / (r['t_issue_us'] * 1e-6) / 1e9
        print('| %s16 | %s | %s | %.0f | %d | %d | %d | %.0f KB | %.0f |' % (
            layout, v, '%d %%' % round(100 * s) if layout == 'bitmap' else '-', r['instr_per_16b'], p['registers'],
            r['threads'], r['warps_per_sm'], r['inflight_kb'], issue_gbps))
    print('\nLittle\'s law wants %.0f KB in flight per SM on an H100 and %.0f KB on an H200 (copy rate × %.1f µs / 132).\n'
          % (DEVICES['H100']['copy_gbps'] * 1e9 * LATENCY_S / SMS / 1024,
             DEVICES['H200']['copy_gbps'] * 1e9 * LATENCY_S / SMS / 1024, LATENCY_S * 1e6))
    for dev in ('H100', 'H200'):
        print('### Predicted time a launch, T = 1, %s (copy rate %.0f GB/s)\n' % (dev, DEVICES[dev]['copy_gbps']))
        print('| shape | form | MB | t_mem µs | t_issue µs | t_lat µs | limit | predicted µs | % of copy |')
        print('|---|---|---|---|---|---|---|---|---|')
        for rows, cols in SHAPES:
            for layout, v, s in forms:
                if layout == 'dense':
                    p = find(profile, kernel='dense16', values=v, max_tokens=1, vec=True, int4k=False)
                else:
                    p = find(profile, kernel='bitmap16', values=v, max_tokens=1, uniform_groups=True)
                r = predict(layout, p, rows, cols, layout, v, s, dev)
                form = '%s %s%s' % (layout, v, ' @ %d %%' % round(100 * s) if layout == 'bitmap' else '')
                print('| %dx%d | %s | %.1f | %.1f | %.1f | %.1f | %s | %.1f | %.0f %% |' % (
                    rows, cols, form, r['bytes'] / 1e6, r['t_mem_us'], r['t_issue_us'], r['t_lat_us'], r['limit'],
                    r['predicted_us'], r['pct_copy']))
                out.append({'device': dev, 'shape': '%dx%d' % (rows, cols), 'layout': layout, 'values': v,
                            'sparsity': s, 'kernel': 'wide16', 'tokens': 1, **{k: r[k] for k in (
                                'bytes', 't_mem_us', 't_issue_us', 't_lat_us', 'predicted_us', 'limit', 'pct_copy')}})
        print()
    if a.json:
        json.dump(out, open(a.json, 'w'), indent=1)


if __name__ == '__main__':
    main()

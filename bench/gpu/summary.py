#!/usr/bin/env python3
"""summary.json of a GPU run of issue 26 (bench/gpu/device.sh).

summary.py KERNELS_JSONL PREDICTED_JSON OUT_JSON

KERNELS_JSONL: bench_fused16 --json records; PREDICTED_JSON: bench/gpu/predicted.json (sol.py's
predictions for the H100 and the H200: the device's name picks the set). Writes the issue's shape:
{"device", "copy_gbps", "kernels": [{"shape", "layout", "values", "sparsity", "us", "effective_gbps",
"pct_copy", "predicted_us", ...}], "decode_7b": [], "offload": []} — one kernel entry per weight form
(the 16-byte kernels, T = 1), with the previous kernels' and cuBLAS's times beside it. decode_7b and
offload stay empty: this run does not measure them (bench/offload/device.sh does the offload table).
"""
import json
import sys


def main():
    kernels_path, predicted_path, out_path = sys.argv[1:4]
    device, copy_gbps, rows = None, None, []
    for line in open(kernels_path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if r.get('record') == 'device':
            device, copy_gbps = r['device'], r['copy_gbps']
        elif r.get('record') == 'kernel':
            rows.append(r)
    gpu = 'H200' if device and 'H200' in device else 'H100' if device and 'H100' in device else None
    predicted = {}
    for p in json.load(open(predicted_path)):
        if p['device'] == gpu:
            predicted[(p['shape'], p['layout'], p['values'], round(p['sparsity'], 2))] = p['predicted_us']

    def find(shape, layout, values, sparsity, kernel, tokens):
        for r in rows:
            if (r['shape'], r['layout'], r['values'], round(r['sparsity'], 2), r['kernel'], r['tokens']) == (
                    shape, layout, values, sparsity, kernel, tokens):
                return r
        return None

    kernels = []
    for r in rows:
        if r['kernel'] != 'wide16' or r['tokens'] != 1:
            continue
        key = (r['shape'], r['layout'], r['values'], round(r['sparsity'], 2))
        entry = {'shape': r['shape'], 'layout': r['layout'], 'values': r['values'], 'sparsity': r['sparsity'],
                 'us': r['us'], 'effective_gbps': r['effective_gbps'], 'pct_copy': r['pct_copy'],
                 'predicted_us': predicted.get(key), 'kernel': 'wide16', 'tokens': 1, 'bytes': r['bytes'],
                 'us_single_launch_l2_flushed': r['us_single']}
        if entry['predicted_us']:
            entry['measured_over_predicted'] = round(r['us'] / entry['predicted_us'], 3)
        prev = find(*key, 'warp_per_row', 1)
        if prev:
            entry['previous_us'] = prev['us']
            entry['speedup_over_previous'] = round(prev['us'] / r['us'], 2)
        t8 = find(*key, 'wide16', 8)
        if t8:
            entry['us_8_tokens'] = t8['us']
        if r['layout'] == 'dense' and r['values'] == 'f16':
            cub = find(r['shape'], 'dense', 'f16', 0.0, 'cublas', 1)
            if cub:
                entry['cublas_us'] = cub['us']
        kernels.append(entry)
    summary = {'device': device, 'copy_gbps': copy_gbps, 'predictions_for': gpu, 'kernels': kernels,
               'decode_7b': [], 'offload': []}
    json.dump(summary, open(out_path, 'w'), indent=1)
    print('summary: %d kernel rows, device %s, copy %.0f GB/s' % (len(kernels), device, copy_gbps or 0))


if __name__ == '__main__':
    main()

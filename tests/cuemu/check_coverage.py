#!/usr/bin/env python3
"""Every __global__ kernel in the CUDA sources was launched by an emulated suite.

check_coverage.py COVERAGE_FILE KERNEL_DIR
COVERAGE_FILE holds lines "name<TAB>instantiation" (cuemu appends one per kernel instance a test
process launched). Prints the kernels and how many instantiations ran; exits 1 naming every
kernel never launched.
"""
import glob
import os
import re
import sys

cov_path, kernel_dir = sys.argv[1], sys.argv[2]
kernels = {}
pat = re.compile(r'__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')
for path in sorted(glob.glob(os.path.join(kernel_dir, '*.cu'))):
    text = re.sub(r'//[^\n]*|/\*.*?\*/', '', open(path).read(), flags=re.S)
    for m in pat.finditer(text):
        kernels[m.group(1)] = os.path.basename(path)
if not kernels:
    sys.exit('check_coverage: no __global__ kernels found in %s' % kernel_dir)
if not os.path.exists(cov_path):
    sys.exit('check_coverage: %s does not exist (run the emulated suites first)' % cov_path)
instances = {}
for line in open(cov_path):
    name, _, inst = line.rstrip('\n').partition('\t')
    instances.setdefault(name, set()).add(inst)
missing = []
for k, f in sorted(kernels.items()):
    n = len(instances.get(k, ()))
    print('%-24s %-18s %3d instantiations launched' % (k, f, n))
    if n == 0:
        missing.append('%s (%s)' % (k, f))
for other in sorted(set(instances) - set(kernels)):
    print('%-24s %-18s %3d (not from the kernel sources)' % (other, '-', len(instances[other])))
if missing:
    sys.exit('check_coverage: never launched under emulation: ' + ', '.join(missing))
print('check_coverage: all %d __global__ kernels launched' % len(kernels))

#!/usr/bin/env python3
"""Rewrites a CUDA source for cuemu: cu2cuemu.py IN.cu OUT.cpp

- `kernel<targs><<<grid, block[, smem[, stream]]>>>(args)` becomes
  `::cuemu::Config(grid, block[, smem[, stream]]).launch<kernel<targs>>("kernel", args)`;
- `__shared__ T name[dims];` inside a function becomes per-block storage that is filled with 0xFF
  bytes when the first thread of a block reaches it (shared memory starts undefined on a GPU);
- `extern __shared__ T name[];` becomes a pointer to the launch's dynamic shared memory.
Comments and string literals are left alone; line numbers are kept (a #line names IN.cu), so
compiler errors and cuemu's barrier sites point into the original file.
"""
import re
import sys


def code_mask(src):
    """True for characters outside comments, string and character literals."""
    mask = [True] * len(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif c in '"\'':
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            mask[k] = False
        i = j
    return mask


def fail(msg):
    sys.exit('cu2cuemu: %s: %s' % (sys.argv[1], msg))


def keep_lines(old, new):
    """new, followed by the newlines of old it dropped, so later lines keep their numbers."""
    return new + '\n' * (old.count('\n') - new.count('\n'))


def rewrite_launches(src):
    mask = code_mask(src)
    out, pos = [], 0
    for m in re.finditer(r'<<<', src):
        start = m.start()
        if not mask[start] or start < pos:
            continue
        # The callee: an identifier (qualified) with optional balanced template arguments.
        j = start - 1
        while j >= 0 and src[j].isspace():
            j -= 1
        targs_end = j + 1
        if src[j] == '>':
            depth = 0
            while j >= 0:
                if src[j] == '>':
                    depth += 1
                elif src[j] == '<':
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            j -= 1
            while j >= 0 and src[j].isspace():
                j -= 1
        name_end = j + 1
        while j >= 0 and (src[j].isalnum() or src[j] in '_:'):
            j -= 1
        name_start = j + 1
        base = src[name_start:name_end]
        if not base:
            fail('cannot find the kernel name before <<< at offset %d' % start)
        callee = src[name_start:targs_end]
        cfg_end = src.find('>>>', start)
        if cfg_end < 0:
            fail('unterminated <<<')
        cfg = src[start + 3:cfg_end]
        k = cfg_end + 3
        while k < len(src) and src[k].isspace():
            k += 1
        if k >= len(src) or src[k] != '(':
            fail('expected ( after >>> for %s' % base)
        k += 1
        rest = k
        while rest < len(src) and src[rest].isspace():
            rest += 1
        empty = rest < len(src) and src[rest] == ')'
        short = base.split('::')[-1]
        new = '::cuemu::Config(%s).launch<%s>("%s"%s' % (' '.join(cfg.split()), ' '.join(callee.split()), short,
                                                        '' if empty else ', ')
        out.append(src[pos:name_start])
        out.append(keep_lines(src[name_start:k], new))
        pos = k
    out.append(src[pos:])
    return ''.join(out)


SHARED = re.compile(r'(extern\s+)?__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([^;{}()]*?)\s*\b(\w+)\s*((?:\[[^\]]*\]\s*)*);')


def rewrite_shared(src):
    mask = code_mask(src)
    out, pos = [], 0
    for m in SHARED.finditer(src):
        if not mask[m.start()]:
            continue
        ext, typ, name, dims = m.group(1), m.group(2).strip(), m.group(3), m.group(4).strip()
        if ext:
            new = '%s* const %s = static_cast<%s*>(::cuemu::dynamic_smem());' % (typ, name, typ)
        else:
            new = ('static thread_local %s %s%s; static thread_local unsigned long long %s_cuemu_epoch_ = 0; '
                   '::cuemu::poison_shared(&%s, sizeof(%s), &%s_cuemu_epoch_);' % (typ, name, dims, name, name, name,
                                                                                   name))
        out.append(src[pos:m.start()])
        out.append(keep_lines(m.group(0), new))
        pos = m.end()
    out.append(src[pos:])
    return ''.join(out)


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: cu2cuemu.py IN.cu OUT.cpp')
    with open(sys.argv[1]) as f:
        src = f.read()
    text = rewrite_launches(rewrite_shared(src))
    header = '#include "cuemu.h"\n#line 1 "%s"\n' % sys.argv[1]
    with open(sys.argv[2] + '.tmp', 'w') as f:
        f.write(header + text)
    import os
    os.replace(sys.argv[2] + '.tmp', sys.argv[2])


if __name__ == '__main__':
    main()

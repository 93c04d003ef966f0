# Convert a .cu file to host C++ for the emulator: include emu.h first,
# inject cuda_int.h's nvcc-only helpers (when the file includes it), and
# turn every
#   NAME<TPL><<<G, B[, SHM[, STREAM]]>>>(ARGS);
# into a checked, queued launch: the arguments are evaluated at the launch
# (a tuple, as CUDA copies them), pointer arguments are checked to be
# device memory, and the body runs when the stream is flushed.
import re, sys
src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
import os
hdr = open(os.environ.get('REPO', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')) + '/train/ops/cuda_int.h').read()
a = hdr.index('#ifdef __CUDACC__'); b = hdr.index('#endif /* __CUDACC__ */')
helpers = hdr[a + len('#ifdef __CUDACC__'):b]
# __FILE__ and __LINE__ as in the .cu (messages name the file:line): a
# #line after the injected helpers, and launches keep their line count
if '#include "train/ops/cuda_int.h"' in s:
    at = s[:s.index('#include "train/ops/cuda_int.h"')].count('\n') + 2
    s = s.replace('#include "train/ops/cuda_int.h"', '#include "train/ops/cuda_int.h"\n' + helpers +
                  '\n#line %d "%s"' % (at, os.path.abspath(src)), 1)

def split_top(t, angle=True):
    parts, depth, cur = [], 0, ''
    op, cl = ('([{<', ')]}>') if angle else ('([{', ')]}')
    for ch in t:
        if ch in op: depth += 1
        elif ch in cl: depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur.strip()); cur = ''
        else:
            cur += ch
    parts.append(cur.strip())
    return parts

# EMU_BN_BLOCKS: fewer reduction blocks per SM for speed (norm_cuda.cu's
# kernels take any gy; only the summation order changes). Unset: the file as it is.
if os.environ.get('EMU_BN_BLOCKS'):
    s, nsub = re.subn(r'BN_BLOCKS_PER_SM = \d+', 'BN_BLOCKS_PER_SM = ' + os.environ['EMU_BN_BLOCKS'], s)
out = []; i = 0
while True:
    j = s.find('<<<', i)
    if j < 0:
        out.append(s[i:]); break
    k = j
    while k > 0 and s[k-1] in ' \t\n': k -= 1
    end_name = k
    if s[k-1] == '>':
        depth = 0
        while True:
            k -= 1
            if s[k] == '>': depth += 1
            elif s[k] == '<':
                depth -= 1
                if depth == 0: break
    while k > 0 and (s[k-1].isalnum() or s[k-1] == '_'):
        k -= 1
    name = re.sub(r'\s+', ' ', s[k:end_name])
    e = s.index('>>>', j)
    cfg = split_top(s[j+3:e])
    if len(cfg) < 2 or not name:  # an example in a comment
        out.append(s[i:e+3]); i = e + 3; continue
    while len(cfg) < 4: cfg.append('0')
    p = e + 3
    while s[p] != '(': p += 1
    depth = 0; q = p
    while True:
        if s[q] == '(': depth += 1
        elif s[q] == ')':
            depth -= 1
            if depth == 0: break
        q += 1
    args = s[p+1:q]
    out.append(s[i:k])
    base = name.split('<')[0].strip()
    al = [x for x in split_top(args, False) if x]
    decl = ' '.join('auto emu_a%d = (%s);' % (n, x) for n, x in enumerate(al))
    names = ', '.join('emu_a%d' % n for n in range(len(al)))
    # a direct call in the body: default arguments and nullptr work as in CUDA
    out.append('do { %s emu_check_args("%s", std::make_tuple(%s)); '
               'emu_launch("%s", dim3(%s), dim3(%s), (size_t)(%s), (cudaStream_t)(%s), '
               '[=]() { %s(%s); });%s } while (0)'
               % (decl, base, names, base, cfg[0], cfg[1], cfg[2], cfg[3], name, names,
                  '\n' * s[k:q+1].count('\n')))
    i = q + 1
res = '#include "emu.h"\n#line 1 "%s"\n' % os.path.abspath(src) + ''.join(out)
open(dst, 'w').write(res)

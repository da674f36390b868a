#!/usr/bin/python3
"""The rule that makes programmatic dependent launch safe (kernels/cuda/launch.cuh), checked.

Every kernel of kernels/cuda/ must begin with PdlEnter() (or PdlEnterAfterPrefetchL2(p, bytes),
which only prefetches into L2 before it): its griddepcontrol.wait is what orders
a kernel launched early after the writes of the kernels before it. And every launch must go
through LaunchKernel (no `<<<`), so that the PDL attribute is given only where that rule holds.

Usage: cuda_launch_lint.py KERNELS_CUDA_DIR. Before linting the tree it checks itself on
synthetic sources that break each rule (a lint that cannot fail proves nothing).
"""
import pathlib
import re
import sys


def strip_comments(text):
    """Comments and string literals blanked out (same length, newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append('"' + ' ' * (j - i - 1) + '"')
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return ''.join(out)


def kernel_problems(name, text):
    """Problems of one source: a list of 'name:line: what' strings."""
    code = strip_comments(text)
    problems = []
    line = lambda pos: code.count('\n', 0, pos) + 1
    for m in re.finditer(r'<<<', code):
        problems.append(f'{name}:{line(m.start())}: a <<<…>>> launch (use LaunchKernel)')
    for m in re.finditer(r'\b__global__\b', code):
        depth, k = 0, m.end()
        while k < len(code):
            ch = code[k]
            if ch == '(':
                depth += 1
            elif ch == ')':
                depth -= 1
            elif ch in '{;' and depth == 0:
                break
            k += 1
        if k >= len(code) or code[k] == ';':
            continue  # a declaration: the definition is checked where it is
        sig = code[m.end():k]
        kernel = re.findall(r'(\w+)\s*\(', sig)
        kernel = kernel[-1] if kernel else '?'
        if kernel == '__launch_bounds__':
            kernel = '?'
        body = code[k + 1:].lstrip()
        if not re.match(r'PdlEnter(\(\);|AfterPrefetchL2\()', body):
            problems.append(f'{name}:{line(m.start())}: kernel {kernel} does not begin with '
                            'PdlEnter();')
    return problems


def self_test():
    good = ('template <int k>\n__global__ void __launch_bounds__(128) A(int x) {\n'
            '  PdlEnter();\n  if (x) return;\n}\n'
            '__global__ void P(const int* w) {\n  PdlEnterAfterPrefetchL2(w, 16);\n}\n'
            '// B<<<1, 1>>>() in a comment is fine\n'
            'void L() { LaunchKernel(A<1>, 1, 1, 0, s, 3); }\n')
    cases = {
        'late enter': ('__global__ void K(int x) {\n  if (x) return;\n  PdlEnter();\n}\n', 1),
        'no enter': ('__global__ void K() {\n  int y = 0;\n}\n', 1),
        'work before the prefetch': ('__global__ void K(int* p) {\n  p[0] = 1;\n'
                                     '  PdlEnterAfterPrefetchL2(p, 16);\n}\n', 1),
        'another prologue': ('__global__ void K(int* p) {\n  PdlEnterAfter([&] { p[0] = 1; });\n}\n',
                             1),
        'chevrons': (good + 'void M() { A<1><<<1, 32, 0, s>>>(2); }\n', 1),
        'two kernels, one bad': (good + '__global__ void C(float* p) { p[0] = 1; }\n', 1),
    }
    if kernel_problems('good', good):
        return f'self-test: a correct source was flagged: {kernel_problems("good", good)}'
    for what, (src, expected) in cases.items():
        got = kernel_problems(what, src)
        if len(got) != expected:
            return f'self-test "{what}": expected {expected} problem(s), got {got}'
    return None


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    failure = self_test()
    if failure:
        print(failure)
        return 1
    root = pathlib.Path(sys.argv[1])
    files = sorted(list(root.glob('*.cu')) + list(root.glob('*.cuh')))
    if not files:
        print(f'{root}: no CUDA sources found')
        return 1
    problems, kernels = [], 0
    for f in files:
        text = f.read_text()
        kernels += len(re.findall(r'\b__global__\b', strip_comments(text)))
        problems += kernel_problems(str(f), text)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f'{kernels} kernels in {len(files)} files: each begins with PdlEnter(), '
          'every launch goes through LaunchKernel')
    return 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""callcycle.py - a call cycle between the object files of one folder.

usage: callcycle.py FILE.o...
Reads each object's defined and undefined symbols (nm), draws an edge A -> B when A calls a
symbol B defines, and prints the first cycle found ("a.o -> b.o -> a.o"). Exit 0 when there is
none, 1 when there is one, 2 when nm fails.
"""
import subprocess
import sys


def symbols(path):
    out = subprocess.run(['nm', path], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == 'U':
            used.add(f[1])
        elif len(f) == 3 and f[1] in 'TDBR':
            defined.add(f[2])
    return defined, used


def main():
    try:
        syms = {p: symbols(p) for p in sys.argv[1:]}
    except (OSError, subprocess.CalledProcessError) as e:
        print(e, file=sys.stderr)
        return 2
    edges = {a: sorted(b for b in syms if b != a and syms[a][1] & syms[b][0]) for a in syms}
    state = {}

    def visit(a, path):
        state[a] = 1
        for b in edges[a]:
            if state.get(b) == 1:
                return path[path.index(b):] + [b]
            if not state.get(b):
                c = visit(b, path + [b])
                if c:
                    return c
        state[a] = 2
        return None

    for a in syms:
        if not state.get(a):
            c = visit(a, [a])
            if c:
                print(' -> '.join(c))
                return 1
    print('no cycle')
    return 0


if __name__ == '__main__':
    sys.exit(main())

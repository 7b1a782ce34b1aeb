# median_tok_s.py LABEL < train_rank.log — prints the median tokens/s/GPU of steps 6 and later of
# a train_rank log (--log-interval 1), and the first error lines if any.
import re, statistics, sys

t = sys.stdin.read()
v = [float(x) for x in re.findall(r'\| tokens/s/GPU: ([0-9.]+) \|', t)]
errors = [l for l in t.splitlines() if 'error' in l.lower()][:3]
print(sys.argv[1], 'steps', len(v), 'median tok/s/GPU', statistics.median(v[5:]) if len(v) > 5 else None, *errors)

#!/usr/bin/env python3
"""Writes an ns-3 flow list of WebSearch traffic (docs/REFERENCE.md section 6).

usage: websearch_flows.py HOSTS RATE_BPS LOAD DURATION_S SEED > FILE

Every host starts flows as a Poisson process with mean gap mean_size x 8 / (rate x
load), each to another host chosen uniformly, its size drawn from the WebSearch CDF
(linear between its points). Python's seeded generator makes the list reproducible.
"""
import random
import sys

CDF = [(0, 0), (10000, 15), (20000, 20), (30000, 30), (50000, 40), (80000, 53),
       (200000, 60), (1000000, 70), (2000000, 80), (5000000, 90), (10000000, 97),
       (30000000, 100)]
MEAN_SIZE = 1.71e6


def draw_size(rng):
    u = rng.random() * 100
    for (s0, c0), (s1, c1) in zip(CDF, CDF[1:]):
        if u <= c1:
            return max(1, int(s0 + (s1 - s0) * (u - c0) / (c1 - c0)))
    return CDF[-1][0]


def main():
    hosts, rate, load, duration, seed = (int(sys.argv[1]), float(sys.argv[2]),
                                         float(sys.argv[3]), float(sys.argv[4]),
                                         int(sys.argv[5]))
    rng = random.Random(seed)
    gap = MEAN_SIZE * 8 / (rate * load)
    flows = []
    for src in range(hosts):
        t = rng.expovariate(1 / gap)
        while t < duration:
            dst = rng.randrange(hosts - 1)
            dst += dst >= src
            flows.append((t, src, dst, draw_size(rng)))
            t += rng.expovariate(1 / gap)
    flows.sort()
    print(len(flows))
    for t, src, dst, size in flows:
        print(src, dst, 3, 100, size, f"{t:.9f}")


main()

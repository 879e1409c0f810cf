"""The median table of several scripts/bench.sh runs.

  bench_median.py RUN.txt...

Each RUN.txt is the raw output of one scripts/bench.sh run (its header line
and table). The runs must be of one commit and the same sections. Every row
of the first run is printed once, with the median of its ratio over all the
runs, the lowest and highest (the spread), and the target; rows whose ratio
is not a number ("-") show the first run's figure. No run is left out.
"""

import re
import statistics
import sys

RATIO = re.compile(r"^([0-9.]+)x")


def read_run(path):
    header, rows = None, []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("ztfs "):
            header = line
        elif line.startswith("| ") and not line.startswith("| workload") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows.append(cells)
    if header is None or not rows:
        sys.exit(f"{path}: no scripts/bench.sh header or table")
    return header, rows


def shape(label):
    """A row's label without its figures, which differ from run to run."""
    return re.sub(r"[0-9.]+", "#", label)


def commit_of(header):
    m = re.search(r"\(commit ([0-9a-f]+)(, with changes)?\)", header)
    return m.group(0) if m else "?"


def main():
    paths = sys.argv[1:]
    if not paths:
        sys.exit(__doc__)
    runs = [read_run(p) for p in paths]
    commits = {commit_of(h) for h, _ in runs}
    if len(commits) != 1:
        sys.exit(f"runs of different commits: {sorted(commits)}")
    first = runs[0][1]
    for path, (_, rows) in zip(paths, runs):
        if [shape(r[0]) for r in rows] != [shape(r[0]) for r in first]:
            sys.exit(f"{path}: its rows differ from {paths[0]}'s")
    print(f"{len(runs)} runs: " + "; ".join(h for h, _ in runs))
    print()
    print("| workload | ratio, median | lowest – highest | target |")
    print("|---|---|---|---|")
    for i, row in enumerate(first):
        ratios = []
        for _, rows in runs:
            m = RATIO.match(rows[i][3])
            if m:
                ratios.append(float(m.group(1)))
        target = row[4]
        if len(ratios) == len(runs):
            print(f"| {row[0]} | {statistics.median(ratios):.2f}x | "
                  f"{min(ratios):.2f}x – {max(ratios):.2f}x | {target} |")
        else:
            print(f"| {row[0]} | {row[2]} (first run) | - | {target} |")


if __name__ == "__main__":
    main()

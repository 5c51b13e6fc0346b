"""What the benchmark scripts share: where the repository and the benchmark inputs are, and the
fleets they generate (fleetgen's arguments for the S, B and M fleets)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The benchmark inputs live in the project's shared data folder next to the repository, not in
# it (benchmarks are not tests; the tests use the copy in tests/data). KALYPSO_SHARED_BENCH
# points elsewhere.
SHARED_BENCH = os.environ.get(
    "KALYPSO_SHARED_BENCH", os.path.normpath(os.path.join(ROOT, "..", "shared", "bench")))
# The repository's copy of ../shared/bench/fleetgen.py (tests/data/fleetgen), the same generator.
FLEETGEN = os.path.join(ROOT, "tests", "data", "fleetgen", "fleetgen.py")
FLEETS = {
    "s": ["--workloads", "50", "--cluster-types", "20", "--policies", "10"],
    "b": ["--workloads", "200", "--cluster-types", "100", "--policies", "30"],
    "m": ["--workloads", "500", "--cluster-types", "200", "--policies", "60"],
}

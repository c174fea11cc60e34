"""Load time of one flight: dataset CSV parsing vs the npz training format (storage.py).

Run: ``.venv/bin/python benchmarks/bench_storage.py`` (from the repository root; uses the
NanoBench files when present, else a synthetic 40 s, 100 Hz flight). Prints a table of the
median wall time per load over several repetitions and the file sizes.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "velobins_eval"))

from velobins_data.datasets import load_flight, read_csv, write_csv
from velobins_data.flight import Flight
from velobins_data.storage import load_cached, load_flight_file, save_flight

NANOBENCH_FILE = Path("/work/shared/data/nanobench/train/B5_helix_fast_rep1.csv.gz")
REPEATS = 7


def _synthetic(n: int = 4000) -> Flight:
    rng = np.random.default_rng(0)
    q = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
    return Flight(
        name="synthetic",
        t=np.arange(n) * 0.01,
        acc=rng.normal(size=(n, 3)),
        gyro=rng.normal(size=(n, 3)),
        rotor=rng.uniform(size=(n, 4)),
        rotor_kind="command",
        p=rng.normal(size=(n, 3)),
        q=q,
        v=rng.normal(size=(n, 3)),
    )


def _median_ms(fn) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def _savez_compressed(flight: Flight, path: Path) -> None:
    np.savez_compressed(path, **{k: getattr(flight, k) for k in ("t", "acc", "gyro", "rotor", "p", "q", "v")})


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench_storage_"))
    rows: list[tuple[str, float, int]] = []
    if NANOBENCH_FILE.is_file():
        flight = load_flight("nanobench", NANOBENCH_FILE)
        parse_ms = _median_ms(lambda: load_flight("nanobench", NANOBENCH_FILE))
        rows.append(("NanoBench .csv.gz (adapter)", parse_ms, NANOBENCH_FILE.stat().st_size))
        cache = tmp / "cache"
        load_cached("nanobench", NANOBENCH_FILE, cache, load_flight)
        hit_ms = _median_ms(lambda: load_cached("nanobench", NANOBENCH_FILE, cache, load_flight))
        rows.append(("NanoBench via load_cached (hit)", hit_ms, next(cache.iterdir()).stat().st_size))
    else:
        flight = _synthetic()
    plain = tmp / "flight.csv"
    write_csv(flight, plain)
    rows.append(("plain CSV (read_csv)", _median_ms(lambda: read_csv(plain)), plain.stat().st_size))
    npz = tmp / "flight.npz"
    save_flight(flight, npz)
    rows.append(("npz uncompressed (storage)", _median_ms(lambda: load_flight_file(npz)), npz.stat().st_size))
    npzc = tmp / "flight_c.npz"
    _savez_compressed(flight, npzc)

    def load_compressed() -> None:
        with np.load(npzc) as z:
            _ = {k: z[k] for k in z.files}

    rows.append(("npz compressed (arrays only)", _median_ms(load_compressed), npzc.stat().st_size))
    print(f"flight: {flight.name}, {len(flight)} rows x {flight.num_rotors} rotors; median of {REPEATS} loads")
    print(f"{'format':34s} {'load [ms]':>10s} {'size [kB]':>10s} {'vs CSV':>8s}")
    base = next(ms for name, ms, _ in rows if name.startswith("plain CSV"))
    for name, ms, size in rows:
        print(f"{name:34s} {ms:10.2f} {size / 1024:10.1f} {base / ms:7.1f}x")


if __name__ == "__main__":
    main()
